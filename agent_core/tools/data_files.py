"""Reading a data file (CSV/TSV/JSON) from the conversation's workspace, for the analysis tools."""

from __future__ import annotations

from agent_core.run_context import RunDeps
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.files import conversation_workspace, workspace_errors
from agent_core.workspace.backend import normalize_virtual_path

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
