"""Hostile uploads: decompression bombs, sheets that declare millions of cells, XML the parser
refuses, file names at the file system's limit, and the same file delivered twice.

Each refusal is a typed :class:`UploadError` with a message that names the file and says why,
reached before the parse can expand; a bad file never fails the user's turn.
"""

from __future__ import annotations

import random
import string
import tracemalloc
import zipfile
from pathlib import Path

import duckdb
import pytest

from agent_core.data.duckdb_engine import list_tables
from agent_core.data.errors import MalformedUpload, UploadTooLarge
from agent_core.data.ingest import load_upload, tables_of_file
from agent_core.data.upload_limits import UploadLimits
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import message
from tests.harness import gateway_settings, running_gateway

openpyxl = pytest.importorskip("openpyxl")

SHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws" / "workspace.duckdb"


def _workbook(path: Path, rows: list[list[object]]) -> Path:
    """A real workbook written by openpyxl."""
    book = openpyxl.Workbook()
    for row in rows:
        book.active.append(row)
    book.save(path)
    return path


_CT = "application/vnd.openxmlformats-officedocument.spreadsheetml"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PACKAGE = {
    "[Content_Types].xml": (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/xl/workbook.xml" ContentType="{_CT}.sheet.main+xml"/>'
        f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{_CT}.worksheet+xml"/>'
        f'<Override PartName="/xl/sharedStrings.xml" ContentType="{_CT}.sharedStrings+xml"/>'
        "</Types>"
    ),
    "_rels/.rels": (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/>'
        "</Relationships>"
    ),
    "xl/workbook.xml": (
        f'<workbook xmlns="{SHEET_NS}" xmlns:r="{_REL}">'
        '<sheets><sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>'
    ),
    "xl/_rels/workbook.xml.rels": (
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/>'
        "</Relationships>"
    ),
}
# A header cell and one data cell, both shared strings (as Excel writes text).
_TWO_CELLS = '<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="2"><c r="A2" t="s"><v>1</v></c></row>'


def _excel_package(path: Path, *, shared: bytes | None = None, sheet: bytes | None = None, **members: bytes) -> Path:
    """A minimal workbook laid out as Excel writes one (text in xl/sharedStrings.xml), with
    any part replaced; deflated at the highest level, as a bomb would be."""
    parts: dict[str, bytes] = {name: xml.encode() for name, xml in _PACKAGE.items()}
    parts["xl/sharedStrings.xml"] = shared if shared is not None else _shared_strings("name", "x")
    parts["xl/worksheets/sheet1.xml"] = sheet if sheet is not None else _sheet("A1:A2", _TWO_CELLS)
    parts.update({name.replace("__", "/"): data for name, data in members.items()})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in parts.items():
            archive.writestr(name, data)
    return path


def _shared_strings(*texts: str) -> bytes:
    items = "".join(f"<si><t>{t}</t></si>" for t in texts)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{SHEET_NS}" count="{len(texts)}" '
        f'uniqueCount="{len(texts)}">{items}</sst>'
    ).encode()


def _sheet(dimension: str | None, rows: str) -> bytes:
    dim = f'<dimension ref="{dimension}"/>' if dimension else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{SHEET_NS}">{dim}'
        f"<sheetData>{rows}</sheetData></worksheet>"
    ).encode()


def _peak_memory(fn) -> tuple[BaseException | None, int]:
    """Run fn under tracemalloc; (the exception it raised, peak bytes allocated meanwhile)."""
    tracemalloc.start()
    try:
        fn()
    except BaseException as error:  # returned to the test
        return error, tracemalloc.get_traced_memory()[1]
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return None, peak


# --- decompression bombs ---------------------------------------------------------------------


def test_shared_string_bomb_is_refused_before_it_is_unpacked(tmp_path: Path, workspace: Path) -> None:
    # One shared string of 30 million characters: a few dozen KB on disk, 30 MB unpacked.
    bomb = _excel_package(tmp_path / "bomb.xlsx", shared=_shared_strings("name", "A" * 30_000_000))
    assert bomb.stat().st_size < 200_000

    error, peak = _peak_memory(lambda: load_upload(workspace, bomb, "report.xlsx", UploadLimits()))

    assert isinstance(error, UploadTooLarge), error
    message = str(error)
    assert message.startswith("report.xlsx was refused") and "xl/sharedStrings.xml" in message
    assert "times larger than it is stored" in message and "100:1" in message
    assert peak < 8 * 1024**2  # refused from the zip directory: nothing was unpacked
    assert list_tables(workspace) == []


def test_long_incompressible_string_is_refused_without_being_parsed(tmp_path: Path, workspace: Path) -> None:
    # 1 M random letters compress only ~1.3:1, so the ratio check passes; the streaming text
    # scan still finds a text far longer than an Excel cell can hold.
    noise = "".join(random.Random(7).choices(string.ascii_letters, k=1_000_000))
    hostile = _excel_package(tmp_path / "long.xlsx", shared=_shared_strings("name", noise))

    error, peak = _peak_memory(lambda: load_upload(workspace, hostile, "long.xlsx", UploadLimits()))

    assert isinstance(error, UploadTooLarge), error
    assert str(error) == (
        "long.xlsx was refused: it contains a text longer than 32,767 characters "
        "(in xl/sharedStrings.xml), more than one Excel cell can hold."
    )
    assert peak < 8 * 1024**2  # read in blocks, never as one string


def test_cell_longer_than_excel_allows_is_refused(tmp_path: Path, workspace: Path) -> None:
    hostile = _excel_package(tmp_path / "cell.xlsx", shared=_shared_strings("name", "B" * 40_000))
    with pytest.raises(UploadTooLarge, match=r"cell.xlsx / Data has a cell with more than 32,767 characters"):
        load_upload(workspace, hostile, "cell.xlsx", UploadLimits())
    assert list_tables(workspace) == []


def test_total_unpacked_size_is_capped(tmp_path: Path, workspace: Path) -> None:
    path = _workbook(tmp_path / "wide.xlsx", [["id", "note"], *[[n, f"row {n}"] for n in range(5_000)]])
    limits = UploadLimits(max_uncompressed_bytes=256 * 1024)
    expected = r"^wide.xlsx unpacks to [\d.]+ KB \(an .xlsx is a zip archive\); the limit is 256.0 KB"
    with pytest.raises(UploadTooLarge, match=expected):
        load_upload(workspace, path, "wide.xlsx", limits)


def test_limits_derive_from_the_upload_cap() -> None:
    limits = UploadLimits(max_bytes=50 * 1024**2)
    assert limits.max_uncompressed_bytes == 1000 * 1024**2  # 20 × the cap
    assert limits.max_shared_strings_bytes == 256 * 1024**2
    assert limits.max_cells == 25 * 1024**2
    assert UploadLimits(max_bytes=200 * 1024**2).max_uncompressed_bytes == 1024**3  # at most 1 GiB
    assert UploadLimits(max_bytes=1024**2).max_cells == 1_000_000


def test_ordinary_repetitive_workbook_still_loads(tmp_path: Path, workspace: Path) -> None:
    # Real sheets compress 10-20:1; they must stay well inside the ratio limit.
    rows = [["region", "channel", "gmv"], *[["East China", "app", 100] for _ in range(12_000)]]
    path = _workbook(tmp_path / "rep.xlsx", rows)
    [table] = load_upload(workspace, path, "rep.xlsx", UploadLimits(max_bytes=2 * 1024**2))
    assert table.row_count == 12_000


# --- cells -----------------------------------------------------------------------------------


def test_sheet_declaring_millions_of_cells_is_refused_before_reading_rows(tmp_path: Path, workspace: Path) -> None:
    # Two real cells, but a used range of 16,384 columns × 200 rows: openpyxl would yield
    # every one of those 3.3 million cells.
    sheet = _sheet(
        "A1:XFD200",
        '<row r="1"><c r="A1" t="s"><v>0</v></c></row><row r="200"><c r="XFD200" t="s"><v>1</v></c></row>',
    )
    hostile = _excel_package(tmp_path / "dim.xlsx", sheet=sheet)
    with pytest.raises(UploadTooLarge) as refused:
        load_upload(workspace, hostile, "dim.xlsx", UploadLimits(max_bytes=1024**2))
    assert str(refused.value) == (
        "dim.xlsx declares 3,276,800 cells (rows × columns of its sheets); the limit is "
        "1,000,000. Upload a smaller extract."
    )


def test_cells_present_without_a_dimension_are_counted_while_streaming(tmp_path: Path, workspace: Path) -> None:
    rows = "".join(f'<row r="{r}">' + "".join(f"<c><v>{r * c}</v></c>" for c in range(400)) + "</row>" for r in range(1, 301))
    hostile = _excel_package(tmp_path / "many.xlsx", sheet=_sheet(None, rows))
    with pytest.raises(UploadTooLarge, match=r"^many.xlsx / Data: the workbook has more than 100,000 cells"):
        load_upload(workspace, hostile, "many.xlsx", UploadLimits(max_cells=100_000))
    assert list_tables(workspace) == []


# --- files the parser refuses ----------------------------------------------------------------


@pytest.mark.parametrize(
    "member, content",
    [
        ("xl/worksheets/sheet1.xml", b'<?xml version="1.0"?><worksheet><sheetData><row r="1"><c'),
        ("xl/workbook.xml", b"<workbook><sheets><sheet name='a'"),
        ("xl/sharedStrings.xml", b"<sst><si><t>unclosed</si></sst>"),
    ],
)
def test_xml_the_parser_refuses_is_a_clear_malformed_upload(tmp_path: Path, workspace: Path, member: str, content: bytes) -> None:
    broken = _excel_package(tmp_path / "broken.xlsx", **{member.replace("/", "__"): content})
    with pytest.raises(MalformedUpload, match=r"^Q3 numbers.xlsx is not a readable .xlsx workbook \(ParseError\)"):
        load_upload(workspace, broken, "Q3 numbers.xlsx", UploadLimits())


def test_undecodable_text_is_a_malformed_upload(tmp_path: Path, workspace: Path) -> None:
    odd = tmp_path / "odd.csv"
    odd.write_bytes(b"\xff\xfea\x00,\x00b")  # a UTF-16 BOM and an odd number of bytes
    with pytest.raises(MalformedUpload, match="odd.csv"):
        load_upload(workspace, odd, "odd.csv", UploadLimits())


# --- the same platform file twice ------------------------------------------------------------


def test_same_platform_file_is_loaded_once_per_conversation(tmp_path: Path, workspace: Path) -> None:
    first_copy = tmp_path / "a.csv"
    first_copy.write_text("region,gmv\nEast,1\nWest,2\n")
    assert tables_of_file(workspace, "F0001") == []
    [first] = load_upload(workspace, first_copy, "sales.csv", file_id="F0001")
    assert not first.already_loaded
    # A caller can see it was loaded without fetching it again.
    assert [t.table_name for t in tables_of_file(workspace, "F0001")] == [first.table_name]
    with duckdb.connect(str(workspace)) as conn:
        conn.execute("CREATE TABLE marker AS SELECT 1 AS x")  # the workspace is otherwise unchanged

    # A retried delivery fetches the same file again.
    [again] = load_upload(workspace, first_copy, "sales.csv", file_id="F0001")
    assert again.already_loaded and again.table_name == first.table_name
    assert again.row_count == 2 and [c.name for c in again.columns] == ["region", "gmv"]
    assert not any("Replaced" in note for note in again.notes)
    assert sorted(t.name for t in list_tables(workspace)) == ["marker", "sales"]

    # Another file of the same name (a new upload) still replaces it.
    newer = tmp_path / "b.csv"
    newer.write_text("region,gmv\nEast,5\n")
    [replaced] = load_upload(workspace, newer, "sales.csv", file_id="F0002")
    assert not replaced.already_loaded and replaced.row_count == 1
    assert any("Replaced" in note for note in replaced.notes)


# --- end to end: a bad file is a note, and the question is answered ---------------------------


async def test_bad_files_get_notes_and_the_question_is_answered(database_url: str, tmp_path: Path) -> None:
    long_name = "季度销售明细" * 13 + "x" * 18 + ".csv"  # 256 bytes in UTF-8
    assert len(long_name.encode()) == 256
    broken = _excel_package(tmp_path / "broken.xlsx", sheet=b"<worksheet><sheetData><row")
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.script(Reply([text("Here is what I could read.")]))
        async with running_gateway(gateway_settings(database_url, tmp_path / "data", anthropic, slack)) as gw:
            files = [
                slack.add_file(long_name, b"region,gmv\nEast,1\n", "text/csv"),
                slack.add_file(
                    "broken.xlsx", broken.read_bytes(), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
                ),
            ]
            await gw.post_event(
                message("what do these show?", "U1", "D1", ts="1700000002.000100", channel_type="im", files=files)
            )
            await gw.settled(timeout=30)
    assert len(anthropic.requests) == 1  # answered on the first attempt, no retries
    note = anthropic.last_request.body["messages"][0]["content"][0]["text"]
    assert f"{long_name}: loaded as table" in note
    assert (
        "broken.xlsx: saved as /uploads/broken.xlsx but not loaded: "
        "broken.xlsx is not a readable .xlsx workbook (ParseError)"
    ) in note
    assert "what do these show?" in note
    assert [slack.markdown_of(p) for p in slack.posted(channel="D1")] == ["Here is what I could read."]
