"""Workspace backend on a local directory.

Safety model: every path is resolved below the conversation's root without following a
symbolic link, by directory descriptors (`agent_core.workspace.nofollow`); writes are atomic.
Listings skip symlinks and the backend's own temporary files.

Concurrency: each call is independent and atomic at the file level; the gateway runs one agent
turn per conversation at a time, so no cross-call locking is needed here.

Isolation: :func:`workspace_for` gives every conversation (thread id) its own root directory,
so two conversations -- in particular two users' DMs -- can never name each other's files.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat as stat_mod
from collections.abc import Generator, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from agent_core.workspace.backend import (
    DEFAULT_AREAS,
    EditResult,
    FileInfo,
    FileNotFound,
    FileTooLarge,
    GrepMatch,
    InvalidArgument,
    NotAFile,
    PathNotAllowed,
    ReadResult,
    WorkspaceBackend,
    WorkspaceLimits,
    split_virtual_path,
)
from agent_core.workspace.blocking import BlockingWorkspace
from agent_core.workspace.nofollow import (
    DIR_FLAGS,
    FILE_FLAGS,
    TEMP_PREFIX,
    NoFollowRoot,
    lstat_at,
    os_errors,
    write_atomically,
)
from agent_core.workspace.textfiles import (
    check_edit,
    child_path,
    data_to_write,
    edit_too_large,
    edited,
    glob_filter,
    grep_data,
    page_lines,
    read_page,
)

_T = TypeVar("_T")


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, tz=UTC)


class LocalWorkspace(BlockingWorkspace):
    """A conversation workspace stored under `root` on the local filesystem.

    Implements :class:`~agent_core.workspace.backend.WorkspaceBackend`. The root and area
    folders are created lazily by the first write.
    """

    def __init__(
        self,
        root: Path,
        limits: WorkspaceLimits | None = None,
        *,
        areas: Sequence[str] = DEFAULT_AREAS,
    ) -> None:
        self._fs = NoFollowRoot(Path(root))
        self.limits = limits or WorkspaceLimits()
        self._areas = tuple(areas)

    def __repr__(self) -> str:
        return f"LocalWorkspace({str(self._fs.root)!r})"

    # ------------------------------------ what differs in kind (the rest: BlockingWorkspace)

    async def commit(self, path: str) -> FileInfo:
        return await self._run(self._stat, path)  # written in place already

    async def pull_private(self, name: str) -> Path:
        return self._fs.root / name  # the only copy is here

    async def push_private(self, name: str) -> None:
        return None

    # ---------------------------------------------------------------- path resolution


    def _visible(self, vdir: str, entry: os.DirEntry[str]) -> bool:
        if entry.name.startswith(TEMP_PREFIX) or entry.is_symlink():
            return False
        # At the root only the areas exist for the model; anything else is server bookkeeping.
        return vdir != "/" or entry.name in self._areas

    def _entry_info(self, vdir: str, entry: os.DirEntry[str]) -> FileInfo | None:
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None  # removed while listing
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        if not is_dir and not stat_mod.S_ISREG(st.st_mode):
            return None
        return FileInfo(
            path=child_path(vdir, entry.name),
            size=0 if is_dir else st.st_size,
            modified_at=_mtime(st),
            is_dir=is_dir,
        )

    def _ls(self, path: str) -> list[FileInfo]:
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        try:
            with (
                self._fs.open_dir(segments, vpath, create=False) as fd,
                os_errors(vpath, "list"),
                os.scandir(fd) as it,
            ):
                entries = sorted((e for e in it if self._visible(vpath, e)), key=lambda e: e.name)
                infos = [self._entry_info(vpath, e) for e in entries]
        except FileNotFound:
            if len(segments) <= 1:
                return []  # the root or an area never written to: empty rather than missing
            return [self._stat(vpath)]  # `ls file` shows the file, as the shell does
        return [i for i in infos if i is not None][: self.limits.ls_max_entries]

    def _stat(self, path: str) -> FileInfo:
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        if len(segments) < 2:
            with self._fs.open_dir(segments, vpath, create=False) as fd:
                dir_st = os.fstat(fd)
            return FileInfo(path=vpath, size=0, modified_at=_mtime(dir_st), is_dir=True)
        with self._fs.open_dir(segments[:-1], vpath, create=False) as dir_fd:
            st = lstat_at(dir_fd, segments[-1])
        if st is None:
            raise FileNotFound(f"no such file or directory: {vpath}", vpath)
        if stat_mod.S_ISLNK(st.st_mode):
            raise PathNotAllowed(f"symbolic links are not allowed: {vpath}", vpath)
        is_dir = stat_mod.S_ISDIR(st.st_mode)
        if not is_dir and not stat_mod.S_ISREG(st.st_mode):
            raise NotAFile(f"{vpath} is not a regular file", vpath)
        return FileInfo(
            path=vpath, size=0 if is_dir else st.st_size, modified_at=_mtime(st), is_dir=is_dir
        )

    def _walk_files(
        self, fd: int, vdir: str
    ) -> Generator[tuple[str, str, int, os.stat_result], None, None]:
        """Yield (virtual path, name, parent fd, stat) of regular files below `fd`, sorted.

        Directories are entered by descriptor with O_NOFOLLOW; symlinks are skipped.
        """
        with os.scandir(fd) as it:
            entries = sorted((e for e in it if self._visible(vdir, e)), key=lambda e: e.name)
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            child_vpath = child_path(vdir, entry.name)
            if stat_mod.S_ISREG(st.st_mode):
                yield child_vpath, entry.name, fd, st
            elif stat_mod.S_ISDIR(st.st_mode):
                try:
                    child = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # replaced by a symlink or removed since scandir: skip it
                try:
                    yield from self._walk_files(child, child_vpath)
                finally:
                    os.close(child)

    @contextmanager
    def _search_root(self, path: str) -> Iterator[tuple[str, int | None, str | None]]:
        """For grep/glob: (virtual base, directory fd, file name when the base is a file).

        The fd is None when the base is the root or an area that does not exist yet.
        """
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        with ExitStack() as stack:
            fd: int | None = None
            single: str | None = None
            try:
                fd = stack.enter_context(self._fs.open_dir(segments, vpath, create=False))
            except FileNotFound:
                if len(segments) > 1:
                    self._stat(vpath)  # raises unless the base is a regular file
                    fd = stack.enter_context(self._fs.open_dir(segments[:-1], vpath, create=False))
                    single = segments[-1]
            yield vpath, fd, single

    # ---------------------------------------------------------------- reading

    def _read(self, path: str, offset: int, limit: int | None) -> ReadResult:
        max_lines = page_lines(offset, limit, self.limits)
        vpath = self._normalize(path)
        with self._fs.open_file(vpath) as (f, _st):
            return read_page(f, vpath, offset, max_lines, self.limits)

    def _read_bytes(self, path: str) -> bytes:
        vpath = self._normalize(path)
        cap = self.limits.read_bytes_max
        with self._fs.open_file(vpath) as (f, st):
            if st.st_size > cap:
                raise FileTooLarge(f"{vpath} is {st.st_size} bytes; the limit is {cap}", vpath)
            with os_errors(vpath, "read"):
                data = f.read(cap + 1)  # +1: the file may have grown since fstat
        if len(data) > cap:
            raise FileTooLarge(f"{vpath} is larger than the {cap} byte limit", vpath)
        return data

    # ---------------------------------------------------------------- writing

    def _write(self, path: str, content: str | bytes, overwrite: bool) -> FileInfo:
        vpath = self._normalize(path)
        segments, data = data_to_write(vpath, content, self.limits)
        with self._fs.open_dir(segments[:-1], vpath, create=True) as dir_fd:
            write_atomically(dir_fd, segments[-1], data, vpath, overwrite=overwrite)
            st = os.stat(segments[-1], dir_fd=dir_fd, follow_symlinks=False)
        return FileInfo(path=vpath, size=st.st_size, modified_at=_mtime(st))

    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> EditResult:
        check_edit(old, new)
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        cap = self.limits.edit_max_bytes
        with self._fs.open_file(vpath) as (f, st):
            if st.st_size > cap:
                raise edit_too_large(vpath, st.st_size, cap)
            raw = f.read(cap + 1)
        updated, replacements = edited(raw, vpath, old, new, replace_all, cap)
        with self._fs.open_dir(segments[:-1], vpath, create=False) as dir_fd:
            write_atomically(
                dir_fd, segments[-1], updated.encode("utf-8"), vpath, overwrite=True
            )
            new_st = os.stat(segments[-1], dir_fd=dir_fd, follow_symlinks=False)
        info = FileInfo(path=vpath, size=new_st.st_size, modified_at=_mtime(new_st))
        return EditResult(file=info, replacements=replacements)

    # ---------------------------------------------------------------- searching

    def _grep(
        self, pattern: str, path: str, glob: str | None, ignore_case: bool
    ) -> list[GrepMatch]:
        if pattern == "":
            raise InvalidArgument("grep pattern must not be empty")
        file_filter = glob_filter(glob) if glob else None
        by_name = glob is not None and "/" not in glob
        needle = pattern.casefold() if ignore_case else pattern
        limits = self.limits
        matches: list[GrepMatch] = []
        with ExitStack() as stack:
            base, fd, single = stack.enter_context(self._search_root(path))
            if fd is None:
                return []
            if single is not None:
                st = os.stat(single, dir_fd=fd, follow_symlinks=False)
                candidates: Iterator[tuple[str, str, int, os.stat_result]] = iter(
                    [(base, single, fd, st)]
                )
            else:
                candidates = stack.enter_context(closing(self._walk_files(fd, base)))
            prefix = base.rstrip("/") + "/"
            for scanned, (vpath, name, dir_fd, st) in enumerate(candidates):
                if scanned >= limits.grep_max_files or len(matches) >= limits.grep_max_matches:
                    break
                if file_filter is not None:
                    target = name if by_name else vpath.removeprefix(prefix)
                    if not file_filter.fullmatch(target):
                        continue
                if st.st_size > limits.grep_max_file_bytes:
                    continue
                matches.extend(
                    self._grep_file(
                        dir_fd,
                        name,
                        vpath,
                        needle,
                        ignore_case,
                        limits.grep_max_matches - len(matches),
                    )
                )
        return matches

    def _grep_file(
        self, dir_fd: int, name: str, vpath: str, needle: str, ignore_case: bool, budget: int
    ) -> list[GrepMatch]:
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
        except OSError:
            return []  # vanished or swapped for a symlink since listing: not searchable
        with os.fdopen(fd, "rb") as f:
            if not stat_mod.S_ISREG(os.fstat(f.fileno()).st_mode):
                return []
            os.set_blocking(f.fileno(), True)
            data = f.read(self.limits.grep_max_file_bytes + 1)
        return grep_data(data, vpath, needle, ignore_case, self.limits, budget)

    def _glob(self, pattern: str, path: str) -> list[FileInfo]:
        if pattern.startswith("/"):
            path, pattern = "/", pattern.lstrip("/")
        regex = glob_filter(pattern)
        results: list[FileInfo] = []
        with ExitStack() as stack:
            base, fd, single = stack.enter_context(self._search_root(path))
            if fd is None or single is not None:
                return []
            prefix = base.rstrip("/") + "/"
            walk = stack.enter_context(closing(self._walk_files(fd, base)))
            for vpath, _name, _dir_fd, st in walk:
                if regex.fullmatch(vpath.removeprefix(prefix)):
                    results.append(FileInfo(path=vpath, size=st.st_size, modified_at=_mtime(st)))
                    if len(results) >= self.limits.glob_max_results:
                        break
        return results

    # ---------------------------------------------------------------- trusted callers

    def _real_path(self, path: str, must_exist: bool) -> Path:
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        if must_exist:
            self._stat(vpath)  # walks every segment without following symlinks
        elif segments:
            with self._fs.open_dir(segments[:-1], vpath, create=True) as dir_fd:
                st = lstat_at(dir_fd, segments[-1])
            if st is not None and stat_mod.S_ISLNK(st.st_mode):
                raise PathNotAllowed(f"symbolic links are not allowed: {vpath}", vpath)
        return self._fs.root.resolve().joinpath(*segments)


_SAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_ID_CHARS = 120


def thread_dir_name(thread_id: str) -> str:
    """A filesystem-safe, collision-free directory name for a conversation's thread id.

    Percent-encodes everything but ``[A-Za-z0-9_-]`` (so ``.``, ``..`` and ``/`` cannot occur and
    distinct ids stay distinct); very long ids keep a readable prefix plus a SHA-256 digest.
    """
    if not thread_id:
        raise ValueError("thread_id must not be empty")
    encoded = _SAFE_ID_CHARS.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), thread_id)
    if len(encoded) <= _MAX_ID_CHARS:
        return encoded
    digest = hashlib.sha256(thread_id.encode()).hexdigest()
    return f"{encoded[:60]}~{digest}"


# Where conversation workspaces live in this process: None for the local directory, else the
# object store's (URL, client), set once at start-up by `use_object_storage` (BA_WORKSPACE_URL).
_object_storage: tuple[str, Any] | None = None


def use_object_storage(url: str | None, endpoint_url: str | None = None) -> None:
    """Keep conversation workspaces under ``url`` (``s3://bucket/prefix``) from now on in this
    process; None keeps them in the data directory."""
    global _object_storage
    if url is None:
        _object_storage = None
        return
    from agent_core.workspace.s3 import s3_client

    _object_storage = (url, s3_client(endpoint_url))


def workspace_for(data_dir: Path, thread_id: str, limits: WorkspaceLimits | None = None) -> WorkspaceBackend:
    """The workspace of one conversation: ``data_dir/workspaces/<encoded thread id>/``, or its
    key prefix in the object store (with that folder as its local cache).

    Each conversation -- each DM included -- gets its own root, so isolation between users holds
    by construction rather than by access checks.
    """
    name = thread_dir_name(thread_id)
    local_root = Path(data_dir) / "workspaces" / name
    if _object_storage is None:
        return LocalWorkspace(local_root, limits)
    from agent_core.workspace.s3 import s3_workspace_for

    url, client = _object_storage
    return s3_workspace_for(client, url, local_root, name, limits)
