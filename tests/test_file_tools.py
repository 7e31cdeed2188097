"""Workspace file tools through the real tools: round trips, paging, caps, and path attacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_core.data.conversation import conversation_database
from agent_core.data.ingest import load_upload
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.files import (
    EditFileTool,
    GlobTool,
    GrepTool,
    LsTool,
    ReadFileTool,
    WriteFileTool,
)


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext(thread_id="feishu:tenant:oc_1:om_1", data_dir=tmp_path / "data")


async def run(tool, ctx: RunContext, **args):
    return await tool.run(tool.Input(**args), ctx)


async def error_of(tool, ctx: RunContext, **args) -> ErrorType:
    with pytest.raises(ToolError) as caught:
        await run(tool, ctx, **args)
    return caught.value.error_type


async def test_write_read_edit_round_trip(ctx: RunContext) -> None:
    written = await run(WriteFileTool(), ctx, path="/data/notes.md", content="# 笔记\nGMV up\n")
    assert written.path == "/data/notes.md" and written.size == len("# 笔记\nGMV up\n".encode())
    page = await run(ReadFileTool(), ctx, path="data/notes.md")
    assert page.content == "     1\t# 笔记\n     2\tGMV up" and page.next_offset is None
    edited = await run(EditFileTool(), ctx, path="/data/notes.md", old_text="up", new_text="down")
    assert edited.replacements == 1
    assert "GMV down" in (await run(ReadFileTool(), ctx, path="/data/notes.md")).content
    listing = await run(LsTool(), ctx, path="/data")
    assert [e.path for e in listing.entries] == ["/data/notes.md"] and not listing.capped


async def test_write_refuses_to_clobber_and_uploads_are_read_only(ctx: RunContext) -> None:
    await run(WriteFileTool(), ctx, path="/reports/a.md", content="one")
    assert await error_of(WriteFileTool(), ctx, path="/reports/a.md", content="two") is (
        ErrorType.INVALID_PARAMETERS
    )
    await run(WriteFileTool(), ctx, path="/reports/a.md", content="two", overwrite=True)
    assert "two" in (await run(ReadFileTool(), ctx, path="/reports/a.md")).content

    await conversation_workspace(ctx).write("/uploads/sales.csv", "a,b\n1,2\n")
    assert await error_of(WriteFileTool(), ctx, path="/uploads/new.csv", content="x") is (
        ErrorType.PERMISSION_DENIED
    )
    assert (
        await error_of(EditFileTool(), ctx, path="uploads/sales.csv", old_text="1", new_text="9")
        is ErrorType.PERMISSION_DENIED
    )
    assert "1,2" in (await run(ReadFileTool(), ctx, path="/uploads/sales.csv")).content


async def test_read_pages_with_next_offset(ctx: RunContext) -> None:
    await run(
        WriteFileTool(), ctx, path="/data/lines.txt", content="".join(f"{i}\n" for i in range(10))
    )
    first = await run(ReadFileTool(), ctx, path="/data/lines.txt", limit=4)
    assert first.lines == 4 and first.next_offset == 4
    rest = await run(ReadFileTool(), ctx, path="/data/lines.txt", offset=first.next_offset)
    assert rest.content.splitlines()[0] == "     5\t4" and rest.next_offset is None


async def test_errors_are_typed(ctx: RunContext) -> None:
    assert (
        await error_of(ReadFileTool(), ctx, path="/data/missing.csv")
        is ErrorType.INVALID_PARAMETERS
    )
    await conversation_workspace(ctx).write("/charts/c.png", b"\x89PNG\r\n\x00\x00")
    assert await error_of(ReadFileTool(), ctx, path="/charts/c.png") is ErrorType.INVALID_PARAMETERS
    await run(WriteFileTool(), ctx, path="/data/t.txt", content="same same")
    assert (
        await error_of(EditFileTool(), ctx, path="/data/t.txt", old_text="same", new_text="x")
        is ErrorType.INVALID_PARAMETERS
    )  # ambiguous: two occurrences
    big = "x" * (conversation_workspace(ctx).limits.edit_max_bytes + 1)
    await conversation_workspace(ctx).write("/data/big.txt", big)
    assert (
        await error_of(
            EditFileTool(), ctx, path="/data/big.txt", old_text="x", new_text="y", replace_all=True
        )
        is ErrorType.RESOURCE_ERROR
    )


ATTACKS = [
    "../etc/passwd",
    "/etc/passwd",
    "/data/../../tables.duckdb",
    "/uploads/../../../etc/shadow",
    "~/secrets.txt",
    "C:/Windows/system.ini",
    "/data\\..\\x",
    "/data/a\x00b",
    "/tables.duckdb",
]


@pytest.mark.parametrize("path", ATTACKS)
async def test_path_attacks_are_permission_denied(ctx: RunContext, path: str) -> None:
    calls = [
        (LsTool(), {"path": path}),
        (ReadFileTool(), {"path": path}),
        (WriteFileTool(), {"path": path, "content": "pwned"}),
        (EditFileTool(), {"path": path, "old_text": "a", "new_text": "b"}),
        (GrepTool(), {"pattern": "root", "path": path}),
        (GlobTool(), {"pattern": "*", "path": path}),
    ]
    for tool, args in calls:
        assert await error_of(tool, ctx, **args) is ErrorType.PERMISSION_DENIED, tool.name


async def test_symlink_out_of_the_workspace_is_refused(ctx: RunContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0")
    data = await conversation_workspace(ctx).real_path("/data", must_exist=False)
    data.mkdir(parents=True)
    (data / "link.txt").symlink_to(secret)
    assert await error_of(ReadFileTool(), ctx, path="/data/link.txt") is ErrorType.PERMISSION_DENIED
    assert (await run(GrepTool(), ctx, pattern="root")).matches == []


async def test_workspace_root_shows_areas_not_the_tables_database(
    ctx: RunContext, tmp_path: Path
) -> None:
    source = tmp_path / "in.csv"
    source.write_text("a\n1\n")
    load_upload(conversation_database(ctx), source, "in.csv")
    await run(WriteFileTool(), ctx, path="/data/x.txt", content="x")
    listing = await run(LsTool(), ctx)
    assert [e.path for e in listing.entries] == ["/data"]


async def test_grep_and_glob_say_when_capped(ctx: RunContext) -> None:
    limits = conversation_workspace(ctx).limits
    lines = "".join(f"match {i}\n" for i in range(limits.grep_max_matches + 5))
    await run(WriteFileTool(), ctx, path="/data/many.txt", content=lines)
    grep = await run(GrepTool(), ctx, pattern="MATCH", ignore_case=True, glob="*.txt")
    assert len(grep.matches) == limits.grep_max_matches and grep.capped and "Narrow" in grep.note
    few = await run(GrepTool(), ctx, pattern="match 7\n".strip(), path="/data/many.txt")
    assert not few.capped and few.note is None and few.matches[0].line_number == 8

    data = await conversation_workspace(ctx).real_path("/data", must_exist=False)
    for i in range(limits.glob_max_results + 1):
        (data / f"f{i:04d}.csv").write_text("x")
    glob = await run(GlobTool(), ctx, pattern="**/*.csv")
    assert len(glob.files) == limits.glob_max_results and glob.capped and glob.note
    one = await run(GlobTool(), ctx, pattern="f0001.*", path="/data")
    assert [f.path for f in one.files] == ["/data/f0001.csv"] and not one.capped


async def test_conversations_have_separate_workspaces(tmp_path: Path) -> None:
    a = RunContext(thread_id="slack:T1:D1:main", data_dir=tmp_path, is_dm=True)
    b = RunContext(thread_id="slack:T1:D2:main", data_dir=tmp_path, is_dm=True)
    await run(WriteFileTool(), a, path="/data/private.txt", content="mine")
    assert (
        await error_of(ReadFileTool(), b, path="/data/private.txt") is ErrorType.INVALID_PARAMETERS
    )
    assert (await run(GlobTool(), b, pattern="**/*")).files == []
