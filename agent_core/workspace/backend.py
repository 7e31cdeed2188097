"""The workspace contract: virtual paths, result models, typed errors and the backend protocol.

Every conversation owns a workspace: the files the user uploaded and the data files, charts and
reports the agent produced. The model only ever sees *virtual* paths such as
``/uploads/sales.csv``; a backend maps them to real storage. Everything in this module is
backend-independent, so the object-store backend (`agent_core.workspace.s3`) follows the same rules.

Virtual path rules (enforced by :func:`normalize_virtual_path`):

* ``/`` separated, optionally without the leading ``/`` (``uploads/a.csv`` == ``/uploads/a.csv``);
  repeated slashes and ``.`` segments are dropped.
* Refused outright, never "cleaned up": ``..`` segments, segments starting with ``~``, any ``:``
  (drive letters such as ``C:``, URL schemes), backslashes, NUL and other control characters.
  Rejecting instead of normalising keeps the rules easy to audit and tells the model clearly what
  went wrong.
* The first segment must be one of the workspace *areas* (by default ``uploads``, ``data``,
  ``charts``, ``reports``). This is what makes an absolute real path such as ``/etc/passwd`` or
  the server's own data directory fail loudly instead of silently mapping into the workspace.

Error messages only ever mention virtual paths: they are safe to show to the model.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_AREAS: tuple[str, ...] = ("uploads", "data", "charts", "reports", "conversation_history")
"""Top-level folders of a workspace; nothing else may be read or written."""

MAX_PATH_CHARS = 1024
MAX_SEGMENT_BYTES = 255  # the usual filesystem limit for one name


class WorkspaceLimits(BaseModel):
    """Size and count caps that keep one tool call from flooding the context or the server."""

    model_config = ConfigDict(frozen=True)

    read_max_lines: int = Field(default=2000, ge=1)  # lines per read() page
    read_max_bytes: int = Field(default=256 * 1024, ge=1024)  # text per read() page
    line_max_chars: int = Field(default=2000, ge=80)  # longer lines are cut with a marker
    read_bytes_max: int = Field(default=50 * 1024 * 1024, ge=1)  # whole-file read_bytes()
    write_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1)  # one write()
    edit_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1)  # files edit() will load
    grep_max_matches: int = Field(default=200, ge=1)  # matches returned by one grep()
    grep_max_file_bytes: int = Field(default=10 * 1024 * 1024, ge=1)  # grep skips larger files
    grep_max_files: int = Field(default=5000, ge=1)  # files one grep() looks at
    glob_max_results: int = Field(default=500, ge=1)  # entries returned by one glob()
    ls_max_entries: int = Field(default=1000, ge=1)  # entries returned by one ls()


class FileInfo(BaseModel):
    """One file or directory, by virtual path."""

    path: str
    size: int
    modified_at: datetime
    is_dir: bool = False


class ReadResult(BaseModel):
    """One page of a text file, numbered like ``cat -n``.

    ``offset`` is the number of lines skipped (0-based), so the first line shown is line
    ``offset + 1``; ``next_offset`` is where the next page starts, or None at end of file.
    """

    path: str
    content: str
    offset: int
    lines: int
    next_offset: int | None = None
    cut_lines: int = 0  # lines shortened to WorkspaceLimits.line_max_chars

    @property
    def truncated(self) -> bool:
        """True when the file continues past this page."""
        return self.next_offset is not None

    def render(self) -> str:
        """The page as the model should see it: numbered lines plus a paging note."""
        notes: list[str] = []
        if self.lines == 0:
            notes.append(
                "[empty file]" if self.offset == 0 else f"[offset={self.offset} is past the end]"
            )
        if self.cut_lines:
            notes.append(f"[{self.cut_lines} over-long line(s) were cut]")
        if self.next_offset is not None:
            notes.append(
                f"[truncated — showing lines {self.offset + 1}-{self.offset + self.lines}; "
                f"continue with offset={self.next_offset}]"
            )
        return "\n".join([self.content, *notes]) if self.content else "\n".join(notes)


class GrepMatch(BaseModel):
    """One matching line."""

    path: str
    line_number: int  # 1-based
    line: str


class EditResult(BaseModel):
    """Outcome of an exact-string edit."""

    file: FileInfo
    replacements: int


# --------------------------------------------------------------------------------------------
# Errors. All messages use virtual paths only, so `str(error)` can go straight to the model.
# --------------------------------------------------------------------------------------------


class WorkspaceError(Exception):
    """Base class of every workspace failure; the message is safe to show to the model."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PathNotAllowed(WorkspaceError):
    """The path breaks a path-safety rule (traversal, symlink, outside the areas, ...)."""


class FileNotFound(WorkspaceError):
    """Nothing exists at the path (or a parent is not a directory)."""


class FileAlreadyExists(WorkspaceError):
    """write() without overwrite=True hit an existing file."""


class NotAFile(WorkspaceError):
    """The path is a directory or a special file where a regular file was needed."""


class NotTextFile(WorkspaceError):
    """A text operation (read/edit) met binary or non-UTF-8 content."""


class FileTooLarge(WorkspaceError):
    """The file or the content is over a WorkspaceLimits cap."""


class EditConflict(WorkspaceError):
    """edit() could not apply: the old text is missing, ambiguous or identical to the new."""


class InvalidArgument(WorkspaceError):
    """A non-path argument is unusable (negative offset, empty pattern, bad glob)."""


# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def normalize_virtual_path(path: str, areas: Sequence[str] = DEFAULT_AREAS) -> str:
    """Validate a virtual path and return its canonical form (``/area/...`` or ``/``).

    Raises PathNotAllowed, with a message naming the rule, for anything unsafe.
    """
    if not isinstance(path, str):
        raise PathNotAllowed("path must be a string")
    shown = _CONTROL_CHARS.sub("?", path)[:200]  # never echo control characters back
    if path.strip() == "":
        raise PathNotAllowed("path is empty; use '/' for the workspace root")
    if len(path) > MAX_PATH_CHARS:
        raise PathNotAllowed(f"path is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in path or _CONTROL_CHARS.search(path):
        raise PathNotAllowed(f"path contains a NUL or control character: {shown!r}")
    if "\\" in path:
        raise PathNotAllowed(f"backslashes are not allowed; use '/': {shown!r}")
    if ":" in path:
        raise PathNotAllowed(
            f"':' is not allowed (drive letters and URLs are not workspace paths): {shown!r}"
        )
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            raise PathNotAllowed(f"'..' is not allowed in workspace paths: {shown!r}")
        if segment.startswith("~"):
            raise PathNotAllowed(f"'~' is not allowed in workspace paths: {shown!r}")
        if len(segment.encode()) > MAX_SEGMENT_BYTES:
            raise PathNotAllowed(f"a path segment is longer than {MAX_SEGMENT_BYTES} bytes")
        segments.append(segment)
    if not segments:
        return "/"
    if segments[0] not in areas:
        raise PathNotAllowed(
            f"{shown!r} is outside the workspace; paths start with one of "
            + ", ".join(f"/{a}/" for a in areas)
        )
    return "/" + "/".join(segments)


def split_virtual_path(vpath: str) -> list[str]:
    """Segments of a *normalized* virtual path (``/`` gives ``[]``)."""
    return [s for s in vpath.split("/") if s]


_UNSAFE_NAME_CHARS = re.compile(r"[^\w.\- ()+,=@]")


def sanitize_filename(name: str, default: str = "file") -> str:
    """Turn an untrusted file name (e.g. a chat attachment's) into one safe path segment.

    Keeps letters (any script), digits and a few punctuation marks, replaces the rest with
    ``_``, strips leading dots and ``~`` so the result is never hidden, ``..`` or home-relative,
    and caps the length while keeping the extension.
    """
    name = unicodedata.normalize("NFC", name).replace("\\", "/").rsplit("/", 1)[-1]
    name = _UNSAFE_NAME_CHARS.sub("_", name).strip().lstrip(".~ ")
    if not name:
        return default
    stem, dot, ext = name.rpartition(".")
    if not dot or len(ext) > 16:
        stem, ext = name, ""
    budget = MAX_SEGMENT_BYTES - len(ext.encode()) - 1
    while len(stem.encode()) > budget:
        stem = stem[:-1]
    return f"{stem}.{ext}" if ext else stem


# --------------------------------------------------------------------------------------------
# Protocol
# --------------------------------------------------------------------------------------------


@runtime_checkable
class WorkspaceBackend(Protocol):
    """File operations on one conversation's workspace, by virtual path.

    Every method may raise a WorkspaceError subclass; its message is model-safe. Backends do
    blocking I/O off the event loop.
    """

    limits: WorkspaceLimits

    async def ls(self, path: str = "/") -> list[FileInfo]:
        """Entries of a directory (one level, sorted by name); a file path lists that file.

        An area that was never written to lists as empty rather than failing.
        """
        ...

    async def stat(self, path: str) -> FileInfo:
        """Metadata of one file or directory."""
        ...

    async def read(self, path: str, offset: int = 0, limit: int | None = None) -> ReadResult:
        """A page of a UTF-8 text file: skip `offset` lines, return up to `limit` lines.

        `limit` defaults to and is capped at `limits.read_max_lines`; the page also stops at
        `limits.read_max_bytes`. Binary files raise NotTextFile.
        """
        ...

    async def read_bytes(self, path: str) -> bytes:
        """The whole file as bytes; FileTooLarge above `limits.read_bytes_max`."""
        ...

    async def write(self, path: str, content: str | bytes, *, overwrite: bool = False) -> FileInfo:
        """Atomically create a file (str is written as UTF-8), creating parent folders.

        Existing files are kept unless `overwrite=True` (FileAlreadyExists otherwise): the model
        must not clobber an upload or an earlier report by accident.
        """
        ...

    async def edit(self, path: str, old: str, new: str, replace_all: bool = False) -> EditResult:
        """Replace the exact text `old` with `new`, atomically.

        EditConflict when `old` is absent, or present more than once and not `replace_all`.
        """
        ...

    async def grep(
        self, pattern: str, path: str = "/", glob: str | None = None, *, ignore_case: bool = False
    ) -> list[GrepMatch]:
        """Lines containing `pattern` as a *literal* substring (no regex: predictable for the
        model and free of catastrophic backtracking).

        `glob` filters files: without '/' it matches the file name at any depth (``*.csv``),
        with '/' the path relative to `path`. Binary files and files over
        `limits.grep_max_file_bytes` are skipped; at most `limits.grep_max_matches` matches are
        returned, so a result of exactly that length may be incomplete.
        """
        ...

    async def glob(self, pattern: str, path: str = "/") -> list[FileInfo]:
        """Files whose path relative to `path` matches `pattern` (``*``, ``?``, ``[...]``,
        ``**`` for any depth); a leading '/' matches from the workspace root. Sorted by path,
        at most `limits.glob_max_results`."""
        ...

    async def real_path(self, path: str, *, must_exist: bool = True) -> Path:
        """TRUSTED INTERNAL CALLERS ONLY (e.g. DuckDB loading an upload, posting a chart).

        The real filesystem location of a virtual path, after the same safety checks as every
        other method. Never put the result in front of the model. On a remote backend it is a
        local copy; a file written there is kept by `commit`.
        """
        ...

    async def commit(self, path: str) -> FileInfo:
        """TRUSTED INTERNAL CALLERS ONLY: keep the file written at ``real_path(path,
        must_exist=False)`` (a remote backend uploads it; the local one has it already)."""
        ...

    async def pull_private(self, name: str) -> Path:
        """TRUSTED INTERNAL CALLERS ONLY: the local path of a server file of the conversation
        beside the areas (e.g. its uploaded tables), fetched first when a remote copy is newer."""
        ...

    async def push_private(self, name: str) -> None:
        """TRUSTED INTERNAL CALLERS ONLY: store that file where other processes find it."""
        ...
