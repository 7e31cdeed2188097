"""The async face shared by workspaces whose work blocks (a local filesystem, an object store).

Each public call runs the backend's synchronous counterpart (`_ls` for `ls`, …) in a worker
thread, so the event loop never waits on a disk or a network round trip. A backend implements
the synchronous methods below and what differs in kind (`commit`, `pull_private`,
`push_private`).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from agent_core.workspace.backend import EditResult, FileInfo, GrepMatch, ReadResult, normalize_virtual_path

_T = TypeVar("_T")


class BlockingWorkspace(ABC):
    """`WorkspaceBackend`'s file operations over a backend's blocking implementation."""

    _areas: tuple[str, ...]

    async def ls(self, path: str = "/") -> list[FileInfo]:
        return await self._run(self._ls, path)

    async def stat(self, path: str) -> FileInfo:
        return await self._run(self._stat, path)

    async def read(self, path: str, offset: int = 0, limit: int | None = None) -> ReadResult:
        return await self._run(self._read, path, offset, limit)

    async def read_bytes(self, path: str) -> bytes:
        return await self._run(self._read_bytes, path)

    async def write(self, path: str, content: str | bytes, *, overwrite: bool = False) -> FileInfo:
        return await self._run(self._write, path, content, overwrite)

    async def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        return await self._run(self._edit, path, old, new, replace_all)

    async def grep(
        self, pattern: str, path: str = "/", glob: str | None = None, *, ignore_case: bool = False
    ) -> list[GrepMatch]:
        return await self._run(self._grep, pattern, path, glob, ignore_case)

    async def glob(self, pattern: str, path: str = "/") -> list[FileInfo]:
        return await self._run(self._glob, pattern, path)

    async def real_path(self, path: str, *, must_exist: bool = True) -> Path:
        return await self._run(self._real_path, path, must_exist)

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        return await asyncio.to_thread(fn, *args)

    def _normalize(self, path: str) -> str:
        return normalize_virtual_path(path, self._areas)

    # ------------------------------------------------------------- the blocking implementation

    @abstractmethod
    def _ls(self, path: str) -> list[FileInfo]: ...

    @abstractmethod
    def _stat(self, path: str) -> FileInfo: ...

    @abstractmethod
    def _read(self, path: str, offset: int, limit: int | None) -> ReadResult: ...

    @abstractmethod
    def _read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def _write(self, path: str, content: str | bytes, overwrite: bool) -> FileInfo: ...

    @abstractmethod
    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> EditResult: ...

    @abstractmethod
    def _grep(self, pattern: str, path: str, glob: str | None, ignore_case: bool) -> list[GrepMatch]: ...

    @abstractmethod
    def _glob(self, pattern: str, path: str) -> list[FileInfo]: ...

    @abstractmethod
    def _real_path(self, path: str, must_exist: bool) -> Path: ...
