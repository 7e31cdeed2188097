"""Workspace file tools: `ls`, `read_file`, `write_file`, `edit_file`, `grep`, `glob`.

Every conversation has its own workspace (``workspace_for(ctx.data_dir, ctx.thread_id)``) with
the areas ``/uploads`` (the user's files, read-only here), ``/data``, ``/charts`` and
``/reports``. Path safety is the workspace's job; these tools map its typed errors onto tool
error types so the model knows whether to fix the call or give up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace, workspace_errors
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.workspace import (
    FileInfo,
    GrepMatch,
    normalize_virtual_path,
)

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps

MAX_WRITE_CHARS = 1_000_000
READ_ONLY_AREA = "/uploads"

def build(deps: ToolDeps) -> list[Tool]:
    return [LsTool(), ReadFileTool(), WriteFileTool(), EditFileTool(), GrepTool(), GlobTool()]


def _ensure_writable(path: str) -> None:
    """Refuse writes into /uploads: those are the user's originals and back their tables."""
    with workspace_errors():
        vpath = normalize_virtual_path(path)
    if vpath == READ_ONLY_AREA or vpath.startswith(READ_ONLY_AREA + "/"):
        raise ToolError(
            f"{vpath}: files in /uploads are the user's originals and read-only; write to "
            "/data/ (working files) or /reports/ instead.",
            ErrorType.PERMISSION_DENIED,
        )


_PATH_HELP = "Workspace path starting with /uploads, /data, /charts or /reports"


class ListingResult(BaseModel):
    path: str
    entries: list[FileInfo]
    capped: bool  # True when the listing stopped at the entry limit


class GrepResult(BaseModel):
    pattern: str
    matches: list[GrepMatch]
    capped: bool
    note: str | None = None  # tells the model how to narrow a capped search


class GlobResult(BaseModel):
    pattern: str
    files: list[FileInfo]
    capped: bool
    note: str | None = None


# --- ls --------------------------------------------------------------------------------------


class LsInput(BaseModel):
    path: str = Field(
        "/",
        max_length=1024,
        description=f"Folder to list (one level). '/' shows the areas. {_PATH_HELP}.",
    )


class LsTool(Tool[LsInput]):
    name = "ls"
    description = (
        "List a folder of this conversation's workspace: /uploads (files the user shared), "
        "/data (your working files), /charts (charts you made), /reports (reports you wrote). "
        "Shows name, size and modification time."
    )
    Input = LsInput
    timeout_s = 30.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: LsInput, ctx: RunContext) -> Any:
        workspace = conversation_workspace(ctx)
        with workspace_errors():
            entries = await workspace.ls(args.path)
            path = normalize_virtual_path(args.path)
        return ListingResult(
            path=path, entries=entries, capped=len(entries) >= workspace.limits.ls_max_entries
        )


# --- read_file -------------------------------------------------------------------------------


class ReadFileInput(BaseModel):
    path: str = Field(..., min_length=1, max_length=1024, description=f"{_PATH_HELP}.")
    offset: int = Field(
        0,
        ge=0,
        description="Lines to skip before the first line shown (0 = start of file). To continue "
        "a truncated read, pass the `next_offset` of the previous result.",
    )
    limit: int | None = Field(
        None,
        ge=1,
        le=2000,
        description="Most lines to return (default and maximum 2000).",
    )


class ReadFileTool(Tool[ReadFileInput]):
    name = "read_file"
    description = (
        "Read a text file (CSV, JSON, Markdown, …) from the workspace, with line numbers, one "
        "page at a time; `next_offset` is set when the file continues. Binary files (Excel, "
        "PNG) cannot be read as text: uploaded spreadsheets are queryable tables instead "
        "(see list_tables)."
    )
    Input = ReadFileInput
    timeout_s = 30.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: ReadFileInput, ctx: RunContext) -> Any:
        with workspace_errors():
            return await conversation_workspace(ctx).read(args.path, args.offset, args.limit)


# --- write_file ------------------------------------------------------------------------------


class WriteFileInput(BaseModel):
    path: str = Field(
        ...,
        min_length=1,
        max_length=1024,
        description="Where to write, e.g. /data/regions.csv or /reports/notes.md (not /uploads). "
        "Missing folders are created.",
    )
    content: str = Field(
        ..., max_length=MAX_WRITE_CHARS, description="The complete text to write (UTF-8)."
    )
    overwrite: bool = Field(
        False, description="Replace the file if it exists. Without it an existing file is kept."
    )


class WriteFileTool(Tool[WriteFileInput]):
    name = "write_file"
    description = (
        "Create a text file in the workspace (/data, /charts or /reports), e.g. a CSV of "
        "figures to chart or notes for a report. Refuses to replace an existing file unless "
        "overwrite is true; /uploads is read-only."
    )
    Input = WriteFileInput
    timeout_s = 30.0

    async def run(self, args: WriteFileInput, ctx: RunContext) -> Any:
        _ensure_writable(args.path)
        with workspace_errors():
            return await conversation_workspace(ctx).write(
                args.path, args.content, overwrite=args.overwrite
            )


# --- edit_file -------------------------------------------------------------------------------


class EditFileInput(BaseModel):
    path: str = Field(
        ..., min_length=1, max_length=1024, description=f"{_PATH_HELP} (not /uploads)."
    )
    old_text: str = Field(
        ...,
        min_length=1,
        description="Exact text to replace, including whitespace. It must occur exactly once "
        "unless replace_all is true; include surrounding lines to make it unique.",
    )
    new_text: str = Field(..., description="The replacement text (may be empty to delete).")
    replace_all: bool = Field(False, description="Replace every occurrence of old_text.")


class EditFileTool(Tool[EditFileInput]):
    name = "edit_file"
    description = (
        "Change a text file in the workspace by replacing an exact piece of text (read the file "
        "first). Safer than rewriting the whole file; /uploads is read-only."
    )
    Input = EditFileInput
    timeout_s = 30.0

    async def run(self, args: EditFileInput, ctx: RunContext) -> Any:
        _ensure_writable(args.path)
        with workspace_errors():
            return await conversation_workspace(ctx).edit(
                args.path, args.old_text, args.new_text, replace_all=args.replace_all
            )


# --- grep ------------------------------------------------------------------------------------


class GrepInput(BaseModel):
    pattern: str = Field(
        ...,
        min_length=1,
        max_length=500,
        description="Text to find, matched literally (not a regular expression).",
    )
    path: str = Field("/", max_length=1024, description=f"Folder or file to search. {_PATH_HELP}.")
    glob: str | None = Field(
        None,
        max_length=200,
        description="Only search files matching this pattern, e.g. '*.csv' (by file name) or "
        "'2026/**/*.md' (by path below `path`).",
    )
    ignore_case: bool = Field(False, description="Match regardless of upper/lower case.")


class GrepTool(Tool[GrepInput]):
    name = "grep"
    description = (
        "Find lines containing a piece of text in the workspace's text files; returns path, "
        "line number and line for each match. Use read_file with an offset to see context."
    )
    Input = GrepInput
    timeout_s = 30.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: GrepInput, ctx: RunContext) -> Any:
        workspace = conversation_workspace(ctx)
        with workspace_errors():
            matches = await workspace.grep(
                args.pattern, args.path, args.glob, ignore_case=args.ignore_case
            )
        cap = workspace.limits.grep_max_matches
        capped = len(matches) >= cap
        return GrepResult(
            pattern=args.pattern,
            matches=matches,
            capped=capped,
            note=(
                f"Stopped at {cap} matches; there may be more. Narrow the search with `path`, "
                "`glob` or a more specific pattern."
                if capped
                else None
            ),
        )


# --- glob ------------------------------------------------------------------------------------


class GlobInput(BaseModel):
    pattern: str = Field(
        ...,
        min_length=1,
        max_length=200,
        description="File pattern relative to `path`: '*' and '?' within a folder name, '**' "
        "for any depth, e.g. '**/*.csv'. A leading '/' matches from the workspace root.",
    )
    path: str = Field("/", max_length=1024, description=f"Folder to search in. {_PATH_HELP}.")


class GlobTool(Tool[GlobInput]):
    name = "glob"
    description = "Find workspace files by name pattern (e.g. '**/*.csv'), sorted by path."
    Input = GlobInput
    timeout_s = 30.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: GlobInput, ctx: RunContext) -> Any:
        workspace = conversation_workspace(ctx)
        with workspace_errors():
            files = await workspace.glob(args.pattern, args.path)
        cap = workspace.limits.glob_max_results
        capped = len(files) >= cap
        return GlobResult(
            pattern=args.pattern,
            files=files,
            capped=capped,
            note=(
                f"Stopped at {cap} files; there may be more. Use a narrower pattern or path."
                if capped
                else None
            ),
        )


FILE_TOOLS: tuple[type[Tool], ...] = (
    LsTool,
    ReadFileTool,
    WriteFileTool,
    EditFileTool,
    GrepTool,
    GlobTool,
)
