"""The conversation's workspace as tools reach it: its backend, its errors as `ToolError`s, and
reading a data file (CSV/TSV/JSON) from it for the analysis tools."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from agent_core.run_context import RunDeps
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.workspace import (
    EditConflict,
    FileAlreadyExists,
    FileNotFound,
    FileTooLarge,
    InvalidArgument,
    NotAFile,
    NotTextFile,
    PathNotAllowed,
    WorkspaceBackend,
    WorkspaceError,
    normalize_virtual_path,
    workspace_for,
)

# Most specific first: the first matching class decides the error type.
_ERROR_TYPES: tuple[tuple[type[WorkspaceError], ErrorType], ...] = (
    (PathNotAllowed, ErrorType.PERMISSION_DENIED),
    (FileTooLarge, ErrorType.RESOURCE_ERROR),
    (FileNotFound, ErrorType.INVALID_PARAMETERS),
    (FileAlreadyExists, ErrorType.INVALID_PARAMETERS),
    (NotAFile, ErrorType.INVALID_PARAMETERS),
    (NotTextFile, ErrorType.INVALID_PARAMETERS),
    (EditConflict, ErrorType.INVALID_PARAMETERS),
    (InvalidArgument, ErrorType.INVALID_PARAMETERS),
)


@contextmanager
def workspace_errors() -> Iterator[None]:
    """Re-raise workspace errors as ToolErrors (their messages only name virtual paths)."""
    try:
        yield
    except WorkspaceError as exc:
        error_type = next(
            (kind for cls, kind in _ERROR_TYPES if isinstance(exc, cls)), ErrorType.EXECUTION_ERROR
        )
        raise ToolError(str(exc), error_type) from exc


def conversation_workspace(deps: RunDeps) -> WorkspaceBackend:
    """The workspace of the conversation a tool runs in."""
    return workspace_for(deps.data_dir, deps.thread_id)


DATA_FILE_AREAS = ("/data/", "/uploads/")


async def read_data_file(ctx: RunDeps, path: str, max_bytes: int) -> tuple[str, bytes]:
    """The normalized virtual path and bytes of a data file under /data or /uploads."""
    workspace = conversation_workspace(ctx)
    with workspace_errors():
        vpath = normalize_virtual_path(path)
        if not vpath.startswith(DATA_FILE_AREAS):
            raise ToolError(f"{vpath}: data files must be under /data or /uploads.", ErrorType.INVALID_PARAMETERS)
        info = await workspace.stat(vpath)
        if info.size > max_bytes:
            raise ToolError(
                f"{vpath} is {info.size:,} bytes; at most {max_bytes // 1024**2} MB can be read here. "
                "Aggregate the data with sql_query first.",
                ErrorType.RESOURCE_ERROR,
            )
        return vpath, await workspace.read_bytes(vpath)


def decode_text(vpath: str, raw: bytes) -> str:
    """UTF-8 (with or without BOM), else GB18030 — the usual encoding of Chinese Excel exports."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            return raw.decode("gb18030")
        except UnicodeDecodeError:
            raise ToolError(f"{vpath} is not UTF-8 or GB18030 text.", ErrorType.INVALID_PARAMETERS) from None


def file_suffix(vpath: str) -> str:
    name = vpath.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[-1].lower() if "." in name else ""
