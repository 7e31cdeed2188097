"""Workspace backend: path safety, paging, edits, search caps, atomic writes, size limits."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.workspace import (
    EditConflict,
    FileAlreadyExists,
    FileNotFound,
    FileTooLarge,
    InvalidArgument,
    LocalWorkspace,
    NotAFile,
    NotTextFile,
    PathNotAllowed,
    WorkspaceBackend,
    WorkspaceError,
    WorkspaceLimits,
    normalize_virtual_path,
    sanitize_filename,
    thread_dir_name,
    workspace_for,
)
from agent_core.workspace.s3 import S3Workspace
from tests.s3_server import new_bucket, s3_server


# Every test runs on both backends, the local directory and S3-compatible object storage, but
# those that work on the local directory's own files, symlinks, temporary files or fsync.
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        # A test that asks for the local directory (`root`, `outside`) works on its files.
        asks = set(inspect.signature(metafunc.function).parameters)
        local_only = bool(asks & {"root", "outside"})
        metafunc.parametrize("backend", ["local"] if local_only else ["local", "s3"])


MakeWorkspace = Callable[..., WorkspaceBackend]


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    return new_bucket(s3_endpoint, monkeypatch)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def make_ws(backend: str, root: Path, tmp_path: Path, request: pytest.FixtureRequest) -> MakeWorkspace:
    """A workspace of the backend under test, with the given limits."""
    if backend == "local":
        return lambda limits=None: LocalWorkspace(root, limits)
    client, bucket = request.getfixturevalue("s3_bucket")
    return lambda limits=None: S3Workspace(client, bucket, "workspaces/t1", tmp_path / "cache", limits)


@pytest.fixture
def ws(make_ws: MakeWorkspace) -> WorkspaceBackend:
    return make_ws()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace holding a secret the model must never reach."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("TOP SECRET\n")
    return d


def test_workspace_implements_protocol(ws: WorkspaceBackend) -> None:
    assert isinstance(ws, WorkspaceBackend)


# ----------------------------------------------------------------------------- path attacks

ATTACKS = [
    "../etc/passwd",
    "/uploads/../../etc/passwd",
    "uploads/../../../x",
    "~/.ssh/id_rsa",
    "/uploads/~root/x",
    "C:\\Windows\\system.ini",
    "C:/Windows/system.ini",
    "/uploads\\..\\secret",
    "/uploads/a\x00.csv",
    "/uploads/a\nb.csv",
    "/etc/passwd",
    "/home/user/.bashrc",
    "file:///etc/passwd",
    "",
]


@pytest.mark.parametrize("path", ATTACKS)
async def test_unsafe_paths_are_refused_everywhere(ws: WorkspaceBackend, path: str) -> None:
    await ws.write("/uploads/ok.csv", "a\n")
    for call in (
        ws.read(path),
        ws.read_bytes(path),
        ws.write(path, "x", overwrite=True),
        ws.edit(path, "a", "b"),
        ws.ls(path),
        ws.grep("a", path),
        ws.glob("*", path),
        ws.real_path(path),
    ):
        with pytest.raises(PathNotAllowed):
            await call


async def test_absolute_real_root_is_not_a_virtual_path(ws: WorkspaceBackend, root: Path) -> None:
    await ws.write("/uploads/a.csv", "x\n")
    with pytest.raises(PathNotAllowed, match="outside the workspace"):
        await ws.read(str(root / "uploads" / "a.csv"))


def test_normalize_virtual_path_canonical_forms() -> None:
    assert normalize_virtual_path("uploads//a/./b.csv") == "/uploads/a/b.csv"
    assert normalize_virtual_path("/") == "/"
    assert normalize_virtual_path("./") == "/"
    with pytest.raises(PathNotAllowed, match="outside the workspace"):
        normalize_virtual_path("/srv/x")


async def test_symlinked_file_is_refused_for_read_and_write(
    ws: WorkspaceBackend, root: Path, outside: Path
) -> None:
    await ws.write("/uploads/ok.csv", "a\n")
    (root / "uploads" / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(PathNotAllowed, match="symbolic link"):
        await ws.read("/uploads/link.txt")
    with pytest.raises(PathNotAllowed):
        await ws.read_bytes("/uploads/link.txt")
    with pytest.raises(PathNotAllowed):
        await ws.write("/uploads/link.txt", "pwned", overwrite=True)
    with pytest.raises(PathNotAllowed):
        await ws.edit("/uploads/link.txt", "TOP", "NOT")
    with pytest.raises(PathNotAllowed):
        await ws.real_path("/uploads/link.txt")
    with pytest.raises(PathNotAllowed):
        await ws.stat("/uploads/link.txt")
    assert (outside / "secret.txt").read_text() == "TOP SECRET\n"


async def test_dangling_symlink_cannot_be_used_to_create_outside(
    ws: WorkspaceBackend, root: Path, outside: Path
) -> None:
    await ws.write("/reports/keep.md", "x")
    (root / "reports" / "new.md").symlink_to(outside / "created.md")
    with pytest.raises(PathNotAllowed):
        await ws.write("/reports/new.md", "x", overwrite=True)
    with pytest.raises(PathNotAllowed):
        await ws.write("/reports/new.md", "x")
    assert not (outside / "created.md").exists()


async def test_symlinked_directory_is_refused(
    ws: WorkspaceBackend, root: Path, outside: Path
) -> None:
    root.mkdir()
    (root / "data").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathNotAllowed):
        await ws.read("/data/secret.txt")
    with pytest.raises(PathNotAllowed):
        await ws.write("/data/new.txt", "x")
    with pytest.raises(PathNotAllowed):
        await ws.ls("/data")
    assert not (outside / "new.txt").exists()


async def test_symlinked_subdirectory_pointing_inside_is_refused_too(
    ws: WorkspaceBackend, root: Path
) -> None:
    await ws.write("/uploads/real/a.csv", "x\n")
    (root / "uploads" / "alias").symlink_to(root / "uploads" / "real")
    with pytest.raises(PathNotAllowed):
        await ws.read("/uploads/alias/a.csv")


async def test_listings_and_searches_skip_symlinks(
    ws: WorkspaceBackend, root: Path, outside: Path
) -> None:
    await ws.write("/uploads/a.txt", "SECRET here\n")
    (root / "uploads" / "link.txt").symlink_to(outside / "secret.txt")
    (root / "uploads" / "dir").symlink_to(outside, target_is_directory=True)
    assert [f.path for f in await ws.ls("/uploads")] == ["/uploads/a.txt"]
    assert [f.path for f in await ws.glob("**/*.txt")] == ["/uploads/a.txt"]
    matches = await ws.grep("SECRET")
    assert [m.path for m in matches] == ["/uploads/a.txt"]


async def test_error_messages_never_reveal_the_real_root(ws: WorkspaceBackend, root: Path) -> None:
    failures: list[WorkspaceError] = []
    for call in (
        ws.read("/uploads/missing.csv"),
        ws.read("/uploads/deep/missing.csv"),
        ws.read_bytes("/data/missing.bin"),
        ws.edit("/reports/missing.md", "a", "b"),
        ws.stat("/charts/none.png"),
    ):
        with pytest.raises(WorkspaceError) as exc:
            await call
        failures.append(exc.value)
    assert all(str(root) not in str(e) and str(root.parent) not in str(e) for e in failures)
    assert all(isinstance(e, FileNotFound) for e in failures)


# ----------------------------------------------------------------------------- listing


async def test_ls_root_shows_only_areas(ws: WorkspaceBackend, root: Path) -> None:
    assert await ws.ls("/") == []
    await ws.write("/uploads/a.csv", "x")
    (root / "server-state.db").write_text("internal")
    (root / "junk").mkdir()
    listing = await ws.ls("/")
    assert [(f.path, f.is_dir) for f in listing] == [("/uploads", True)]


async def test_ls_missing_area_is_empty_but_missing_folder_fails(ws: WorkspaceBackend) -> None:
    assert await ws.ls("/charts") == []
    with pytest.raises(FileNotFound):
        await ws.ls("/charts/nope")


async def test_ls_a_file_lists_the_file(ws: WorkspaceBackend) -> None:
    await ws.write("/data/x.csv", "1,2\n")
    [info] = await ws.ls("/data/x.csv")
    assert info.path == "/data/x.csv" and info.size == 4 and not info.is_dir


async def test_ls_is_capped(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(ls_max_entries=3))
    for i in range(5):
        await ws.write(f"/data/{i}.txt", "x")
    assert len(await ws.ls("/data")) == 3


# ----------------------------------------------------------------------------- reading


async def test_read_pages_with_line_numbers(ws: WorkspaceBackend) -> None:
    await ws.write("/uploads/t.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    page = await ws.read("/uploads/t.txt", offset=0, limit=4)
    assert page.content.splitlines() == [f"{i:>6}\tline {i}" for i in range(1, 5)]
    assert page.next_offset == 4 and page.truncated
    assert "continue with offset=4" in page.render()

    last = await ws.read("/uploads/t.txt", offset=8, limit=4)
    assert last.content.splitlines() == ["     9\tline 9", "    10\tline 10"]
    assert last.next_offset is None and "truncated" not in last.render()

    past = await ws.read("/uploads/t.txt", offset=50)
    assert past.lines == 0 and "past the end" in past.render()


async def test_read_limit_is_capped_by_limits(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(read_max_lines=3))
    await ws.write("/uploads/t.txt", "a\nb\nc\nd\ne\n")
    page = await ws.read("/uploads/t.txt", limit=100)
    assert page.lines == 3 and page.next_offset == 3


async def test_read_stops_at_byte_cap_and_cuts_long_lines(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(read_max_bytes=1024, line_max_chars=100))
    await ws.write("/uploads/wide.txt", ("x" * 300 + "\n") * 50)
    page = await ws.read("/uploads/wide.txt")
    assert 0 < page.lines < 50 and page.next_offset == page.lines
    assert len(page.content.encode()) <= 1024
    assert page.cut_lines == page.lines and "[line cut]" in page.content


async def test_read_handles_file_without_trailing_newline_and_empty_file(
    ws: WorkspaceBackend,
) -> None:
    await ws.write("/uploads/a.txt", "one\ntwo")
    assert (await ws.read("/uploads/a.txt")).content == "     1\tone\n     2\ttwo"
    await ws.write("/uploads/empty.txt", "")
    assert "empty file" in (await ws.read("/uploads/empty.txt")).render()


async def test_read_rejects_binary_and_bad_arguments(ws: WorkspaceBackend) -> None:
    await ws.write("/uploads/a.parquet", b"PAR1\x00\x01\x02")
    with pytest.raises(NotTextFile):
        await ws.read("/uploads/a.parquet")
    await ws.write("/uploads/a.txt", "x\n")
    with pytest.raises(InvalidArgument):
        await ws.read("/uploads/a.txt", offset=-1)
    with pytest.raises(InvalidArgument):
        await ws.read("/uploads/a.txt", limit=0)
    with pytest.raises(NotAFile):
        await ws.read("/uploads")


async def test_read_bytes_size_limit(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(read_bytes_max=10))
    await ws.write("/charts/small.png", b"\x89PNG12345")
    assert await ws.read_bytes("/charts/small.png") == b"\x89PNG12345"
    await ws.write("/charts/big.png", b"x" * 11)
    with pytest.raises(FileTooLarge):
        await ws.read_bytes("/charts/big.png")


# ----------------------------------------------------------------------------- writing


async def test_write_refuses_overwrite_unless_asked(ws: WorkspaceBackend) -> None:
    await ws.write("/reports/r.md", "v1")
    with pytest.raises(FileAlreadyExists, match="overwrite=true"):
        await ws.write("/reports/r.md", "v2")
    assert (await ws.read_bytes("/reports/r.md")) == b"v1"
    info = await ws.write("/reports/r.md", "v2!", overwrite=True)
    assert info.size == 3 and (await ws.read_bytes("/reports/r.md")) == b"v2!"


async def test_write_creates_parents_and_leaves_no_temp_files(
    ws: WorkspaceBackend, root: Path
) -> None:
    await ws.write("/charts/2024/03/gmv.png", b"\x89PNG")
    await ws.write("/charts/2024/03/gmv.png", b"\x89PNG2", overwrite=True)
    files = [p.name for p in (root / "charts" / "2024" / "03").iterdir()]
    assert files == ["gmv.png"]


async def test_write_is_atomic_when_it_fails_midway(
    ws: WorkspaceBackend, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ws.write("/reports/r.md", "original")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(WorkspaceError, match="No space left") as exc:
        await ws.write("/reports/r.md", "half-written", overwrite=True)
    assert str(root) not in str(exc.value)
    monkeypatch.undo()
    assert (await ws.read_bytes("/reports/r.md")) == b"original"
    assert [p.name for p in (root / "reports").iterdir()] == ["r.md"]


async def test_write_limits_and_targets(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(write_max_bytes=5))
    with pytest.raises(FileTooLarge):
        await ws.write("/data/x.csv", "123456")
    with pytest.raises(PathNotAllowed):
        await ws.write("/uploads", "x")
    with pytest.raises(PathNotAllowed):
        await ws.write("/", "x")
    await ws.write("/data/sub/x.csv", "1")
    with pytest.raises(NotAFile):
        await ws.write("/data/sub", "x", overwrite=True)


# ----------------------------------------------------------------------------- editing


async def test_edit_exact_unique_replacement(ws: WorkspaceBackend) -> None:
    await ws.write("/reports/r.md", "# Title\nGMV fell 10%.\nOrders fell 5%.\n")
    result = await ws.edit("/reports/r.md", "GMV fell 10%", "GMV fell 12%")
    assert result.replacements == 1
    assert (await ws.read_bytes("/reports/r.md")).decode() == (
        "# Title\nGMV fell 12%.\nOrders fell 5%.\n"
    )


async def test_edit_conflicts(ws: WorkspaceBackend) -> None:
    await ws.write("/reports/r.md", "fell\nfell\nrose\n")
    with pytest.raises(EditConflict, match="not found"):
        await ws.edit("/reports/r.md", "flat", "x")
    with pytest.raises(EditConflict, match="2 times"):
        await ws.edit("/reports/r.md", "fell", "dropped")
    with pytest.raises(EditConflict):
        await ws.edit("/reports/r.md", "", "x")
    with pytest.raises(EditConflict):
        await ws.edit("/reports/r.md", "rose", "rose")
    result = await ws.edit("/reports/r.md", "fell", "dropped", replace_all=True)
    assert result.replacements == 2
    assert (await ws.read_bytes("/reports/r.md")) == b"dropped\ndropped\nrose\n"


async def test_edit_size_limit_and_binary(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(edit_max_bytes=10))
    await ws.write("/data/big.txt", "a" * 11)
    with pytest.raises(FileTooLarge):
        await ws.edit("/data/big.txt", "a", "b", replace_all=True)
    await ws.write("/data/bin.dat", b"\xff\xfe\x00a")
    with pytest.raises(NotTextFile):
        await ws.edit("/data/bin.dat", "a", "b")


# ----------------------------------------------------------------------------- grep / glob


async def test_grep_is_literal_with_line_numbers(ws: WorkspaceBackend) -> None:
    await ws.write("/uploads/a.csv", "region,gmv\nEast,10\nabc,1\na.c,2\n")
    matches = await ws.grep("a.c", "/uploads")
    assert [(m.path, m.line_number, m.line) for m in matches] == [("/uploads/a.csv", 4, "a.c,2")]
    assert [m.line_number for m in await ws.grep("east", ignore_case=True)] == [2]
    with pytest.raises(InvalidArgument):
        await ws.grep("")


async def test_grep_glob_filter_single_file_and_skips(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(grep_max_file_bytes=100))
    await ws.write("/uploads/a.csv", "needle\n")
    await ws.write("/uploads/sub/b.csv", "needle\n")
    await ws.write("/reports/c.md", "needle\n")
    await ws.write("/uploads/big.csv", "needle\n" + "x" * 200)
    await ws.write("/uploads/bin.csv", b"needle\x00")
    by_name = await ws.grep("needle", glob="*.csv")
    assert [m.path for m in by_name] == ["/uploads/a.csv", "/uploads/sub/b.csv"]
    by_path = await ws.grep("needle", "/uploads", glob="sub/*.csv")
    assert [m.path for m in by_path] == ["/uploads/sub/b.csv"]
    single = await ws.grep("needle", "/reports/c.md")
    assert [m.path for m in single] == ["/reports/c.md"]
    assert await ws.grep("needle", "/charts") == []


async def test_grep_match_cap(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(grep_max_matches=5))
    await ws.write("/data/a.txt", "hit\n" * 20)
    await ws.write("/data/b.txt", "hit\n" * 20)
    assert len(await ws.grep("hit")) == 5


async def test_glob_patterns_and_cap(make_ws: MakeWorkspace) -> None:
    ws = make_ws(WorkspaceLimits(glob_max_results=3))
    for path in ["/uploads/a.csv", "/uploads/b.xlsx", "/uploads/x/c.csv", "/data/d.csv"]:
        await ws.write(path, "1")
    assert [f.path for f in await ws.glob("*.csv", "/uploads")] == ["/uploads/a.csv"]
    assert [f.path for f in await ws.glob("/uploads/**/*.csv")] == [
        "/uploads/a.csv",
        "/uploads/x/c.csv",
    ]
    assert [f.path for f in await ws.glob("[ab].*", "/uploads")] == [
        "/uploads/a.csv",
        "/uploads/b.xlsx",
    ]
    assert len(await ws.glob("**/*")) == 3
    with pytest.raises(InvalidArgument):
        await ws.glob("../*")
    assert await ws.glob("*.csv", "/reports") == []


# ----------------------------------------------------------------------------- real_path


async def test_real_path_for_trusted_callers(ws: WorkspaceBackend, root: Path) -> None:
    await ws.write("/uploads/sales.csv", "a\n")
    real = await ws.real_path("/uploads/sales.csv")
    assert real == root.resolve() / "uploads" / "sales.csv" and real.read_text() == "a\n"
    with pytest.raises(FileNotFound):
        await ws.real_path("/data/out.parquet")
    target = await ws.real_path("/data/out.parquet", must_exist=False)
    assert target.parent.is_dir() and not target.exists()


# ----------------------------------------------------------------------------- per-thread roots


def test_thread_dir_names_are_safe_and_distinct() -> None:
    ids = ["slack:T1:C2:1700000000.123", "slack:T1:C2:1700000000_123", "..", ".", "a/b", "a%2Fb"]
    names = [thread_dir_name(i) for i in ids]
    assert len(set(names)) == len(names)
    for name in names:
        assert "/" not in name and name not in (".", "..") and not name.startswith(".")
    long = thread_dir_name("feishu:" + "x" * 500)
    assert len(long) < 255 and long != thread_dir_name("feishu:" + "x" * 499)
    with pytest.raises(ValueError):
        thread_dir_name("")


async def test_workspaces_of_different_threads_are_isolated(tmp_path: Path) -> None:
    dm_alice = workspace_for(tmp_path, "slack:T1:D_ALICE:main")
    dm_bob = workspace_for(tmp_path, "slack:T1:D_BOB:main")
    await dm_alice.write("/uploads/salary.csv", "alice,100\n")
    assert await dm_bob.ls("/uploads") == []
    with pytest.raises(FileNotFound):
        await dm_bob.read("/uploads/salary.csv")
    real = await dm_alice.real_path("/uploads/salary.csv")
    assert real.is_relative_to((tmp_path / "workspaces").resolve())


def test_sanitize_filename() -> None:
    assert sanitize_filename("Q1 sales (final).csv") == "Q1 sales (final).csv"
    assert sanitize_filename("../../etc/passwd") == "passwd"
    assert sanitize_filename("C:\\Users\\me\\report:v2.xlsx") == "report_v2.xlsx"
    assert sanitize_filename("..") == "file"
    assert sanitize_filename(".env") == "env"
    assert sanitize_filename("销售数据.csv") == "销售数据.csv"
    long = sanitize_filename("a" * 400 + ".csv")
    assert long.endswith(".csv") and len(long.encode()) <= 255
    normalize_virtual_path("/uploads/" + sanitize_filename("we!rd\x00na~me?.csv"))


# ----------------------------------------------------------------------------- object storage


async def test_s3_listing_shows_only_areas_and_errors_never_name_the_bucket(
    s3_bucket: tuple[Any, str], tmp_path: Path
) -> None:
    client, bucket = s3_bucket
    ws = S3Workspace(client, bucket, "workspaces/t1", tmp_path / "cache")
    assert await ws.ls("/") == []
    await ws.write("/uploads/a.csv", "x")
    client.put_object(Bucket=bucket, Key="workspaces/t1/tables.duckdb", Body=b"internal")
    client.put_object(Bucket=bucket, Key="workspaces/t1/junk/x", Body=b"internal")
    client.put_object(Bucket=bucket, Key="workspaces/t2/uploads/other.csv", Body=b"another conversation")
    assert [(f.path, f.is_dir) for f in await ws.ls("/")] == [("/uploads", True)]
    assert [f.path for f in await ws.glob("**/*")] == ["/uploads/a.csv"]
    with pytest.raises(FileNotFound) as missing:
        await ws.read("/uploads/other.csv")
    assert bucket not in str(missing.value) and "workspaces" not in str(missing.value)


async def test_s3_real_path_is_a_fresh_local_copy_and_commit_stores_a_written_file(
    s3_bucket: tuple[Any, str], tmp_path: Path
) -> None:
    client, bucket = s3_bucket
    ws = S3Workspace(client, bucket, "workspaces/t1", tmp_path / "cache")
    await ws.write("/uploads/sales.csv", "a\n")
    real = await ws.real_path("/uploads/sales.csv")
    assert real == tmp_path / "cache" / "uploads" / "sales.csv" and real.read_text() == "a\n"
    await ws.write("/uploads/sales.csv", "a,b\n", overwrite=True)
    assert (await ws.real_path("/uploads/sales.csv")).read_text() == "a,b\n"
    with pytest.raises(FileNotFound):
        await ws.real_path("/data/out.parquet")
    target = await ws.real_path("/data/out.parquet", must_exist=False)
    target.write_bytes(b"PAR1")
    await ws.commit("/data/out.parquet")
    stored = client.get_object(Bucket=bucket, Key="workspaces/t1/data/out.parquet")["Body"].read()
    assert stored == b"PAR1"
