"""Conversation workspaces: uploaded files become DuckDB tables the model can query.

Each conversation has one DuckDB *workspace* file. :func:`load_upload` turns an uploaded CSV,
TSV, Excel (.xlsx), Parquet or JSON file into tables there; :func:`list_tables` and
:func:`describe_table` inspect any DuckDB file (the workspace or the demo database); and
:func:`run_duckdb_query` runs a guarded, read-only, time- and size-capped query.

Names the model sees in :func:`run_duckdb_query`:

* uploaded tables are in the workspace's default schema, unqualified: ``SELECT * FROM orders_2026``
  (``main.orders_2026`` also works);
* the demo database is attached read-only as catalog ``demo``: ``SELECT * FROM demo.sales``.

Safety layers of a query: the SQL guard (:func:`agent_core.data.sql_guard.ensure_read_only`),
then a connection that opens the workspace with ``read_only=True``, attaches the demo database
``READ_ONLY``, disables external access (no file, network or extension access, so ``ATTACH``,
``COPY`` and ``read_csv`` fail even if the guard missed them) and locks the configuration so
the query cannot re-enable anything. A timer thread interrupts the query at its deadline.

DuckDB allows only one configuration of a database file per process at a time (an upload's
read-write connection and a query's read-only one cannot coexist), so every access to a
workspace file from this module holds a per-file lock; across processes DuckDB's own file
lock applies and a conflicting access fails with :class:`QueryFailed` / :class:`UploadError`.
"""

from __future__ import annotations

import csv
import re
import tempfile
import threading
import time
import unicodedata
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from datetime import time as dt_time
from pathlib import Path
from typing import Any

import charset_normalizer
import duckdb
from pydantic import BaseModel, Field, model_validator

from agent_core.data.demo import DEMO_CATALOG
from agent_core.data.errors import (
    MalformedUpload,
    QueryFailed,
    QueryTimeout,
    TableNotFound,
    UnsupportedUploadType,
    UploadError,
    UploadTooLarge,
)
from agent_core.data.sql_guard import ensure_read_only, with_row_limit

# Never let DuckDB fetch an extension at run time: the machine has no internet, and a query
# must not be able to pull code in. Parquet and JSON are built into the Python wheel.
DUCKDB_BASE_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}

# Bookkeeping table in each workspace: which table came from which uploaded file.
_UPLOADS_TABLE = "_ba_uploads"
_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".txt": None}
_JSON_SUFFIXES = {".json", ".jsonl", ".ndjson"}
_EXCEL_SUFFIXES = {".xlsx", ".xlsm"}
_PARQUET_SUFFIXES = {".parquet", ".pq"}
_MAX_NAME_LENGTH = 48
_SAMPLE_ROWS = 5

_NUMERIC_TYPES = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
)
_TEMPORAL_TYPES = ("DATE", "TIME", "TIMESTAMP")


# --- models ----------------------------------------------------------------------------------


# Excel's own limit on the text of one cell: a longer string was not written by a spreadsheet.
EXCEL_MAX_CELL_CHARS = 32_767
_MiB = 1024 * 1024
_GiB = 1024 * _MiB
_DEFAULT_MAX_BYTES = 50 * _MiB


class UploadLimits(BaseModel):
    """Caps applied to one uploaded file.

    ``max_bytes`` (BA_MAX_UPLOAD_MB) caps the file as uploaded. An .xlsx is a zip archive, so
    that caps only its *compressed* size: a 144 KB workbook can unpack to gigabytes. Before
    openpyxl parses anything the archive is checked against the limits below; those left unset
    are derived from ``max_bytes``:

    * ``max_uncompressed_bytes``: all members together unpack to at most 20 × ``max_bytes``,
      and never more than 1 GiB. Real workbooks compress 5-16:1 (sheet XML is repetitive).
    * ``max_compression_ratio``: no member over 1 MiB unpacked may be compressed better than
      100:1 (real sheets: 5-20:1; a decompression bomb: ~1000:1).
    * ``max_shared_strings_bytes``: openpyxl holds the whole shared-string table in memory,
      so it may unpack to at most 10 × ``max_bytes``, and never more than 256 MiB.
    * ``max_cell_chars``: 32,767 characters, Excel's own limit for one cell. Checked before the
      parse on the XML text (no text run may be longer than that many characters could be
      written as) and again on every parsed cell.
    * ``max_cells``: the rows × columns a parse may produce over all sheets, counting the empty
      cells openpyxl fills in for a sheet's declared dimension: ``max_bytes`` / 2 (real .xlsx
      files need about 3 compressed bytes per cell), and at least one million.
    """

    max_bytes: int = Field(default=_DEFAULT_MAX_BYTES, gt=0)
    max_rows: int = Field(default=1_000_000, gt=0)  # per table (sheet)
    # The three below default to values derived from max_bytes (see _derive_unpacked_limits).
    max_uncompressed_bytes: int = Field(default=min(20 * _DEFAULT_MAX_BYTES, _GiB), gt=0)
    max_compression_ratio: float = Field(default=100.0, gt=1)
    max_shared_strings_bytes: int = Field(default=min(10 * _DEFAULT_MAX_BYTES, 256 * _MiB), gt=0)
    max_cell_chars: int = Field(default=EXCEL_MAX_CELL_CHARS, gt=0)
    max_cells: int = Field(default=max(_DEFAULT_MAX_BYTES // 2, 1_000_000), gt=0)

    @model_validator(mode="before")
    @classmethod
    def _derive_unpacked_limits(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        try:
            max_bytes = int(data.get("max_bytes") or _DEFAULT_MAX_BYTES)
        except (TypeError, ValueError):
            return data  # the field's own validation reports it
        derived = {
            "max_uncompressed_bytes": min(20 * max_bytes, _GiB),
            "max_shared_strings_bytes": min(10 * max_bytes, 256 * _MiB),
            "max_cells": max(max_bytes // 2, 1_000_000),
        }
        return {**derived, **{k: v for k, v in data.items() if v is not None}}


class ColumnInfo(BaseModel):
    name: str
    type: str


class LoadedTable(BaseModel):
    """One table created from an upload."""

    table_name: str
    source_file: str
    sheet: str | None = None
    row_count: int
    columns: list[ColumnInfo]
    detected_encoding: str | None = None  # None for binary formats (xlsx, parquet)
    notes: list[str] = Field(default_factory=list)
    # True when this platform file was loaded before (see load_upload's file_id): not reloaded.
    already_loaded: bool = False


class TableInfo(BaseModel):
    name: str
    row_count: int
    column_count: int
    source_file: str | None = None
    sheet: str | None = None


class ColumnStats(BaseModel):
    name: str
    type: str
    null_share: float  # 0..1; 0 for an empty table
    distinct_count: int  # approximate
    min: Any = None  # only for numeric and date/time columns
    max: Any = None


class TableDescription(BaseModel):
    name: str
    row_count: int
    columns: list[ColumnStats]
    sample_rows: list[list[Any]]


class QueryResult(BaseModel):
    """Rows of a guarded query, with the caps that applied."""

    sql: str  # the normalized SQL that ran (before the row cap was pushed into it)
    columns: list[str]
    column_types: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool  # True if more rows existed than row_cap / byte_cap allowed
    elapsed_ms: int


# --- uploads ---------------------------------------------------------------------------------


def load_upload(
    db_path: Path,
    file_path: Path,
    original_name: str,
    limits: UploadLimits | None = None,
    *,
    file_id: str | None = None,
) -> list[LoadedTable]:
    """Load one uploaded file into the workspace database at ``db_path``.

    ``original_name`` is the file name the user uploaded (it decides the table name and the
    format). A CSV/TSV/JSON/Parquet file becomes one table; an .xlsx file one table per
    non-empty sheet. Uploading a file with the same ``original_name`` again replaces the tables
    it created before; other name clashes get a numeric suffix.

    ``file_id`` is the platform's id of the shared file (Slack ``F…``, Feishu ``file_key``).
    Loading the same id into the same workspace again — a retried delivery of the message that
    shared it — loads nothing and returns the tables it created the first time, marked
    ``already_loaded`` (unless a later upload of the same name has replaced them).

    Everything happens in one transaction: on any error nothing of the file is stored.
    Raises :class:`UploadTooLarge`, :class:`UnsupportedUploadType` or :class:`MalformedUpload`
    — whatever is wrong with the file's content, never another exception.
    """
    limits = limits or UploadLimits()
    file_path = Path(file_path)
    size = file_path.stat().st_size
    if size > limits.max_bytes:
        raise UploadTooLarge(
            f"{original_name} is {_human_bytes(size)}; the upload limit is "
            f"{_human_bytes(limits.max_bytes)}. Upload a smaller extract (fewer rows or columns)."
        )
    if size == 0:
        raise MalformedUpload(f"{original_name} is empty.")
    suffix = Path(original_name).suffix.lower() or file_path.suffix.lower()
    if suffix not in (_CSV_SUFFIXES.keys() | _JSON_SUFFIXES | _EXCEL_SUFFIXES | _PARQUET_SUFFIXES):
        hint = " Save it as .xlsx first." if suffix in {".xls", ".numbers", ".ods"} else ""
        raise UnsupportedUploadType(
            f"{original_name}: files of type '{suffix or 'unknown'}' cannot be loaded as a table. "
            f"Supported: CSV, TSV, Excel (.xlsx), Parquet, JSON / JSON lines.{hint}"
        )

    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ba-upload-") as scratch, _workspace_lock(db_path):
        try:
            if file_id is not None and db_path.exists():
                with duckdb.connect(str(db_path), config=DUCKDB_BASE_CONFIG) as conn:
                    earlier = _tables_of_file(conn, file_id)
                if earlier:
                    return earlier
            sources = _prepare_sources(file_path, original_name, suffix, Path(scratch), limits)
            with duckdb.connect(str(db_path), config=DUCKDB_BASE_CONFIG) as conn:
                return _store_tables(conn, sources, original_name, limits, file_id)
        except duckdb.Error as error:
            # E.g. another process holds the workspace file; the transaction was rolled back.
            raise UploadError(
                f"{original_name} could not be stored: {_first_line(error)}"
            ) from error


class _Source(BaseModel):
    """One table-to-be: a DuckDB table-function call reading a prepared file."""

    reader_sql: str  # e.g. "read_csv($path, ...)"; $path is bound separately
    path: str
    sheet: str | None = None
    sheet_index: int = 0  # position in the workbook, for names of sheets without ASCII letters
    encoding: str | None = None
    notes: list[str] = Field(default_factory=list)


def _prepare_sources(
    file_path: Path, original_name: str, suffix: str, scratch: Path, limits: UploadLimits
) -> list[_Source]:
    """Turn the upload into files DuckDB can read natively (UTF-8 text or Parquet)."""
    try:
        return _convert_upload(file_path, original_name, suffix, scratch, limits)
    except UploadError:
        raise
    except Exception as error:  # noqa: BLE001 - untrusted content must fail as an UploadError
        raise MalformedUpload(
            f"{original_name} could not be read ({type(error).__name__})."
        ) from error


def _convert_upload(
    file_path: Path, original_name: str, suffix: str, scratch: Path, limits: UploadLimits
) -> list[_Source]:
    if suffix in _PARQUET_SUFFIXES:
        return [_Source(reader_sql="read_parquet($path)", path=str(file_path))]
    if suffix in _EXCEL_SUFFIXES:
        return _excel_sources(file_path, original_name, scratch, limits)
    text, encoding = _decode(file_path.read_bytes(), original_name)
    utf8_path = scratch / f"upload{suffix}"
    utf8_path.write_text(text, encoding="utf-8")
    notes = [] if encoding in ("utf-8", "ascii") else [f"Transcoded from {encoding} to UTF-8."]
    if suffix in _JSON_SUFFIXES:
        # format='auto' accepts a JSON array of objects as well as JSON lines.
        reader = "read_json($path, format='auto', sample_size=-1)"
    else:
        delimiter = _CSV_SUFFIXES[suffix]
        delim_arg = "" if delimiter is None else f", delim='{delimiter}'"
        # sample_size=-1: detect types from every row (files are capped), so a late odd value
        # does not fail the load; header=true because business exports always have one.
        reader = f"read_csv($path, header=true, sample_size=-1{delim_arg})"
    return [_Source(reader_sql=reader, path=str(utf8_path), encoding=encoding, notes=notes)]


def _decode(raw: bytes, original_name: str) -> tuple[str, str]:
    """Decode text bytes: UTF-8 (with or without BOM), then GB18030 (a superset of GBK, the usual
    encoding of Chinese Excel/CSV exports), then charset-normalizer's best guess."""
    for bom, encoding in ((b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if raw.startswith(bom):
            return raw.decode(encoding), "utf-16"
    try:
        return raw.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        return raw.decode("gb18030"), "gb18030"
    except UnicodeDecodeError:
        pass
    best = charset_normalizer.from_bytes(raw).best()
    if best is None:
        raise MalformedUpload(
            f"{original_name}: the text encoding could not be recognised. Save it as UTF-8."
        )
    return str(best), best.encoding


def _excel_sources(
    file_path: Path, original_name: str, scratch: Path, limits: UploadLimits
) -> list[_Source]:
    """Write each non-empty sheet as a UTF-8 CSV; DuckDB then detects column types.

    The archive is checked against the unpacked-size limits first (:func:`_check_xlsx_archive`),
    then parsed with openpyxl in streaming (read-only) mode under a cell budget. Anything the
    parser refuses — a corrupt zip, XML it cannot parse, a part it does not expect — is a
    :class:`MalformedUpload` naming the file, never an uncaught error.
    """
    try:
        _check_xlsx_archive(file_path, original_name, limits)
        return _parse_workbook(file_path, original_name, scratch, limits)
    except UploadError:
        raise
    except MemoryError as error:
        raise UploadTooLarge(
            f"{original_name} needs more memory to read than is available. Upload a smaller "
            "extract (fewer rows or columns)."
        ) from error
    except Exception as error:  # noqa: BLE001 - any parser failure on untrusted input
        # E.g. xml.etree.ElementTree.ParseError, a KeyError for a missing part, or another
        # format renamed to .xlsx.
        raise MalformedUpload(
            f"{original_name} is not a readable .xlsx workbook ({type(error).__name__}). "
            "Open it in Excel and save it again as .xlsx, or export the sheet as CSV."
        ) from error


def _parse_workbook(
    file_path: Path, original_name: str, scratch: Path, limits: UploadLimits
) -> list[_Source]:
    # Imported here: openpyxl is only needed for Excel uploads and is slow to import.
    import openpyxl

    workbook = openpyxl.load_workbook(file_path, read_only=True, data_only=True)
    sources: list[_Source] = []
    try:
        # The declared used range of every sheet, before reading any row: a read-only sheet
        # yields that many rows and columns, filling in empty cells.
        declared = sum(_declared_cells(sheet) for sheet in workbook.worksheets)
        if declared > limits.max_cells:
            raise UploadTooLarge(
                f"{original_name} declares {declared:,} cells (rows × columns of its sheets); "
                f"the limit is {limits.max_cells:,}. Upload a smaller extract."
            )
        budget = _CellBudget(limits.max_cells)
        for index, sheet in enumerate(workbook.worksheets):
            csv_path = scratch / f"sheet_{index}.csv"
            written = _sheet_to_csv(
                sheet.iter_rows(values_only=True),
                csv_path,
                limits,
                f"{original_name} / {sheet.title}",
                budget,
            )
            if written:
                sources.append(
                    _Source(
                        reader_sql="read_csv($path, header=true, sample_size=-1, delim=',')",
                        path=str(csv_path),
                        sheet=sheet.title,
                        sheet_index=index,
                    )
                )
    finally:
        workbook.close()
    if not sources:
        raise MalformedUpload(f"{original_name} has no sheet with data.")
    return sources


def _declared_cells(sheet: Any) -> int:
    """Rows × columns of a read-only sheet's declared dimension (0 if it declares none)."""
    bounds = (sheet.min_row, sheet.min_column, sheet.max_row, sheet.max_column)
    if not all(isinstance(b, int) for b in bounds):
        return 0
    min_row, min_col, max_row, max_col = bounds
    return max(max_row - min_row + 1, 0) * max(max_col - min_col + 1, 0)


# Members of an .xlsx that openpyxl parses as XML; other members (images, binaries) are only
# counted towards the unpacked size.
_XML_MEMBER_SUFFIXES = (".xml", ".rels", ".vml")
_RATIO_EXEMPT_BYTES = _MiB  # small members (styles, themes) may compress well, harmlessly
_MAX_ARCHIVE_MEMBERS = 10_000
_SHARED_STRINGS_TYPE = (
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"
)
# The most bytes one character of cell text can take in the XML: "_x000D_" (Excel's escape
# of a control character) is 7, "&#x10FFFF;" 10.
_MAX_XML_BYTES_PER_CHAR = 10


def _check_xlsx_archive(file_path: Path, original_name: str, limits: UploadLimits) -> None:
    """Refuse an .xlsx whose parse could expand far beyond its upload size, before parsing.

    Checks (see :class:`UploadLimits`): the number of members; their total unpacked size (as
    the zip directory declares it: Python's zipfile never yields more than a member's declared
    size, so the declaration is a hard bound); each large member's compression ratio; the
    shared-string table's unpacked size; and, streaming through each XML member in fixed-size
    blocks, that no text run (the bytes between two ``<``) is longer than the longest cell text
    Excel can write. The stream is read block by block, so this check itself uses bounded
    memory.
    """
    try:
        archive = zipfile.ZipFile(file_path)
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise MalformedUpload(f"{original_name} is not a readable .xlsx workbook.") from error
    with archive:
        members = archive.infolist()
        if len(members) > _MAX_ARCHIVE_MEMBERS:
            raise MalformedUpload(
                f"{original_name} is not a readable .xlsx workbook: its archive has "
                f"{len(members):,} members."
            )
        unpacked = sum(member.file_size for member in members)
        if unpacked > limits.max_uncompressed_bytes:
            raise UploadTooLarge(
                f"{original_name} unpacks to {_human_bytes(unpacked)} (an .xlsx is a zip "
                f"archive); the limit is {_human_bytes(limits.max_uncompressed_bytes)}. "
                "Upload a smaller extract (fewer rows or columns), or export it as CSV."
            )
        for member in members:
            ratio = member.file_size / max(member.compress_size, 1)
            if member.file_size > _RATIO_EXEMPT_BYTES and ratio > limits.max_compression_ratio:
                raise UploadTooLarge(
                    f"{original_name} was refused: its part {member.filename} unpacks "
                    f"{ratio:,.0f} times larger than it is stored (from "
                    f"{_human_bytes(member.compress_size)} to {_human_bytes(member.file_size)}), "
                    f"more than the {limits.max_compression_ratio:g}:1 a real workbook "
                    "reaches. Open it in Excel and save it again, or export it as CSV."
                )
        shared = _shared_strings_member(archive)
        if shared is not None and shared.file_size > limits.max_shared_strings_bytes:
            raise UploadTooLarge(
                f"{original_name}: its text cells unpack to {_human_bytes(shared.file_size)}; "
                f"the limit is {_human_bytes(limits.max_shared_strings_bytes)}. Upload a "
                "smaller extract, or export it as CSV."
            )
        longest_run = limits.max_cell_chars * _MAX_XML_BYTES_PER_CHAR
        for member in members:
            if member.filename.lower().endswith(_XML_MEMBER_SUFFIXES):
                if _has_text_run_over(archive, member, longest_run):
                    raise UploadTooLarge(
                        f"{original_name} was refused: it contains a text longer than "
                        f"{limits.max_cell_chars:,} characters (in {member.filename}), more "
                        "than one Excel cell can hold."
                    )


def _shared_strings_member(archive: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """The shared-string table's member, found as openpyxl finds it: by its content type in
    ``[Content_Types].xml`` (the conventional ``xl/sharedStrings.xml`` as a fallback)."""
    import xml.etree.ElementTree as ElementTree

    names = {info.filename: info for info in archive.infolist()}
    manifest = names.get("[Content_Types].xml")
    if manifest is not None and manifest.file_size <= _RATIO_EXEMPT_BYTES:
        try:
            root = ElementTree.fromstring(archive.read(manifest))
        except (ElementTree.ParseError, zipfile.BadZipFile, ValueError, OSError):
            root = None  # openpyxl will refuse the file with the same problem
        if root is not None:
            for element in root.iter():
                if element.get("ContentType") == _SHARED_STRINGS_TYPE:
                    found = names.get((element.get("PartName") or "").lstrip("/"))
                    if found is not None:
                        return found
    return names.get("xl/sharedStrings.xml")


def _has_text_run_over(archive: zipfile.ZipFile, member: zipfile.ZipInfo, limit: int) -> bool:
    """Whether the member's XML has a run of more than ``2 × limit`` bytes without a ``<``.

    Well-formed XML has no ``<`` inside text or attribute values, so the gaps between ``<``
    bound the longest text node. Reading aligned blocks of ``limit + 1`` bytes, a block without
    any ``<`` proves a run longer than ``limit``; any run of ``2 × limit + 1`` bytes or more
    contains such a block. A C-level ``in`` test per block keeps this as fast as unzipping.
    """
    block_size = limit + 1
    try:
        with archive.open(member) as stream:
            while block := stream.read(block_size):
                if len(block) == block_size and b"<" not in block:
                    return True
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return False  # a damaged member: openpyxl will refuse the file with a clear message
    return False


class _CellBudget:
    """Cells a parse may still produce (over all sheets of one workbook)."""

    def __init__(self, cells: int) -> None:
        self.limit = cells
        self.left = cells


def _sheet_to_csv(
    rows: Iterator[Sequence[Any]],
    target: Path,
    limits: UploadLimits,
    label: str,
    budget: _CellBudget | None = None,
) -> bool:
    """Write a sheet's rows to CSV starting at its first non-empty row (the header).

    Returns False for a sheet without any data row. Raises :class:`UploadTooLarge` as soon as
    the row cap, the cell budget or the cell text limit is passed, so a huge sheet is never
    fully read.
    """
    budget = budget or _CellBudget(limits.max_cells)
    with target.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        width = 0
        data_rows = -1  # the header does not count
        for row in rows:
            # Blank rows count too (at least one cell each): a sheet may declare a million.
            budget.left -= max(len(row), 1)
            if budget.left < 0:
                raise UploadTooLarge(
                    f"{label}: the workbook has more than {budget.limit:,} cells (rows × "
                    "columns), the upload limit. Upload a smaller extract."
                )
            cells = [_excel_cell(value) for value in row]
            if any(len(cell) > limits.max_cell_chars for cell in cells):
                raise UploadTooLarge(
                    f"{label} has a cell with more than {limits.max_cell_chars:,} characters, "
                    "more than one Excel cell can hold."
                )
            if not any(cells):
                continue  # blank rows (often above the header or between blocks)
            if width == 0:
                # Trailing empty header cells are formatting leftovers, not columns.
                width = max(i + 1 for i, cell in enumerate(cells) if cell)
            writer.writerow((cells + [""] * width)[:width])
            data_rows += 1
            if data_rows > limits.max_rows:
                raise UploadTooLarge(
                    f"{label} has more than {limits.max_rows:,} rows, the upload limit."
                )
    return data_rows > 0


def _excel_cell(value: Any) -> str:
    """Excel cell value as CSV text that DuckDB's type detection reads back correctly."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == dt_time(0) else value.isoformat(sep=" ")
    if isinstance(value, (date, dt_time)):
        return value.isoformat()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _store_tables(
    conn: duckdb.DuckDBPyConnection,
    sources: list[_Source],
    original_name: str,
    limits: UploadLimits,
    file_id: str | None = None,
) -> list[LoadedTable]:
    reserved = {
        row[0]
        for row in conn.execute(
            "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category <> 'unreserved'"
        ).fetchall()
    }
    conn.execute("BEGIN TRANSACTION")
    try:
        _ensure_uploads_table(conn)
        replaced = [
            row[0]
            for row in conn.execute(
                f"SELECT table_name FROM {_UPLOADS_TABLE} WHERE original_name = ?", [original_name]
            ).fetchall()
        ]
        for table in replaced:
            conn.execute(f"DROP TABLE IF EXISTS {quote_identifier(table)}")
        conn.execute(f"DELETE FROM {_UPLOADS_TABLE} WHERE original_name = ?", [original_name])
        taken = {name.lower() for name in _main_tables(conn)}
        loaded = []
        for source in sources:
            base = table_name_for(original_name, source.sheet, source.sheet_index, reserved)
            name = _dedupe(base, taken)
            taken.add(name)
            loaded.append(_load_one(conn, source, name, original_name, limits))
            conn.execute(
                f"INSERT INTO {_UPLOADS_TABLE} (table_name, original_name, sheet, loaded_at, "
                "file_id) VALUES (?, ?, ?, current_localtimestamp(), ?)",
                [name, original_name, source.sheet, file_id],
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    if replaced:
        loaded[0].notes.append(
            f"Replaced the tables from the previous upload of {original_name}: "
            f"{', '.join(replaced)}."
        )
    return loaded


def tables_of_file(db_path: Path, file_id: str) -> list[LoadedTable]:
    """The tables platform file ``file_id`` was loaded into in this workspace (marked
    ``already_loaded``), or ``[]``: lets a caller skip fetching a file it already loaded."""
    db_path = Path(db_path)
    if not db_path.exists():
        return []
    with _read_connection(db_path) as conn:
        return _tables_of_file(conn, file_id)


def _ensure_uploads_table(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_UPLOADS_TABLE} (table_name VARCHAR PRIMARY KEY, "
        "original_name VARCHAR NOT NULL, sheet VARCHAR, loaded_at TIMESTAMP NOT NULL, "
        "file_id VARCHAR)"
    )
    # Workspaces created before file ids were recorded.
    conn.execute(f"ALTER TABLE {_UPLOADS_TABLE} ADD COLUMN IF NOT EXISTS file_id VARCHAR")


def _tables_of_file(conn: duckdb.DuckDBPyConnection, file_id: str) -> list[LoadedTable]:
    """The tables an earlier load of platform file ``file_id`` created in this workspace."""
    has_column = _scalar(conn.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? AND column_name = 'file_id'",
        [_UPLOADS_TABLE],
    ))
    if not has_column:
        return []
    rows = conn.execute(
        f"SELECT table_name, original_name, sheet FROM {_UPLOADS_TABLE} WHERE file_id = ? "
        "ORDER BY rowid",
        [file_id],
    ).fetchall()
    tables = []
    for name, original_name, sheet in rows:
        row_count = _scalar(conn.execute(f"SELECT count(*) FROM {quote_identifier(name)}"))
        columns = [
            ColumnInfo(name=col, type=typ)
            for col, typ in conn.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = "
                "current_database() AND schema_name = 'main' AND table_name = ? "
                "ORDER BY column_index",
                [name],
            ).fetchall()
        ]
        tables.append(
            LoadedTable(
                table_name=name,
                source_file=original_name,
                sheet=sheet,
                row_count=row_count,
                columns=columns,
                already_loaded=True,
                notes=["Already loaded from this file earlier in the conversation."],
            )
        )
    return tables


def _load_one(
    conn: duckdb.DuckDBPyConnection,
    source: _Source,
    name: str,
    original_name: str,
    limits: UploadLimits,
) -> LoadedTable:
    label = original_name if source.sheet is None else f"{original_name} / {source.sheet}"
    try:
        # One row past the cap is enough to know the file is too long.
        conn.execute(
            f"CREATE TABLE {quote_identifier(name)} AS "
            f"SELECT * FROM {source.reader_sql} LIMIT {limits.max_rows + 1}",
            {"path": source.path},
        )
    except duckdb.Error as error:
        raise MalformedUpload(
            f"{label} could not be read as a table: {_first_line(error)}"
        ) from error
    row_count = _scalar(conn.execute(f"SELECT count(*) FROM {quote_identifier(name)}"))
    if row_count > limits.max_rows:
        raise UploadTooLarge(f"{label} has more than {limits.max_rows:,} rows, the upload limit.")
    if row_count == 0:
        raise MalformedUpload(f"{label} has a header but no data rows.")
    columns = [
        ColumnInfo(name=col, type=typ)
        for col, typ in conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() "
            "WHERE database_name = current_database() AND schema_name = 'main' AND table_name = ? "
            "ORDER BY column_index",
            [name],
        ).fetchall()
    ]
    return LoadedTable(
        table_name=name,
        source_file=original_name,
        sheet=source.sheet,
        row_count=row_count,
        columns=columns,
        detected_encoding=source.encoding,
        notes=list(source.notes),
    )


def table_name_for(
    original_name: str, sheet: str | None = None, index: int = 0, reserved: set[str] | None = None
) -> str:
    """A clean lower-case snake_case ASCII table name for an uploaded file (and sheet).

    Non-ASCII letters are decomposed and dropped (``Café`` → ``cafe``); a name with nothing
    left (e.g. all Chinese) falls back to ``upload`` (and ``sheet<N>`` for a sheet). Names
    starting with a digit get a ``t_`` prefix; SQL keywords get a ``_data`` suffix.
    """
    stem = _snake(Path(original_name).stem) or "upload"
    if sheet is not None:
        stem = f"{stem}_{_snake(sheet) or f'sheet{index + 1}'}"
    name = stem[:_MAX_NAME_LENGTH].rstrip("_")
    if name[0].isdigit():
        name = f"t_{name}"
    if reserved and name in reserved:
        name = f"{name}_data"
    return name


def _snake(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_")


def _dedupe(name: str, taken: set[str]) -> str:
    candidate, counter = name, 2
    while candidate in taken:
        candidate = f"{name}_{counter}"
        counter += 1
    return candidate


# --- inspection ------------------------------------------------------------------------------


def list_tables(db_path: Path) -> list[TableInfo]:
    """Tables of a DuckDB file (its ``main`` schema), without internal bookkeeping tables."""
    db_path = Path(db_path)
    if not db_path.exists():
        return []
    with _read_connection(db_path) as conn:
        sources = _upload_sources(conn)
        rows = conn.execute(
            "SELECT table_name, estimated_size, column_count FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main' "
            "AND NOT starts_with(table_name, '_') ORDER BY table_name"
        ).fetchall()
        tables = []
        for name, _, column_count in rows:
            # estimated_size is not exact; a count(*) is cheap in DuckDB.
            row_count = _scalar(conn.execute(f"SELECT count(*) FROM {quote_identifier(name)}"))
            source_file, sheet = sources.get(name, (None, None))
            tables.append(
                TableInfo(
                    name=name,
                    row_count=row_count,
                    column_count=column_count,
                    source_file=source_file,
                    sheet=sheet,
                )
            )
    return tables


def describe_table(db_path: Path, table: str) -> TableDescription:
    """Columns with types, null share, approximate distinct count and (for numbers and dates)
    min/max, plus the row count and a few sample rows of one table of a DuckDB file."""
    db_path = Path(db_path)
    if not db_path.exists():
        raise TableNotFound(f"There is no table {table!r}: no tables have been loaded yet.")
    with _read_connection(db_path) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                "AND schema_name = 'main' AND NOT starts_with(table_name, '_')"
            ).fetchall()
        ]
        if table not in names:
            available = ", ".join(sorted(names)) or "none"
            raise TableNotFound(f"There is no table {table!r}. Available tables: {available}.")
        quoted = quote_identifier(table)
        columns = conn.execute(
            "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = "
            "current_database() AND schema_name = 'main' AND table_name = ? ORDER BY column_index",
            [table],
        ).fetchall()
        aggregates = ["count(*)"]
        for name, data_type in columns:
            col = quote_identifier(name)
            aggregates += [f"count({col})", f"approx_count_distinct({col})"]
            if _has_range(data_type):
                aggregates += [f"min({col})", f"max({col})"]
        stats = _one_row(conn.execute(f"SELECT {', '.join(aggregates)} FROM {quoted}"))
        sample = conn.execute(f"SELECT * FROM {quoted} LIMIT {_SAMPLE_ROWS}").fetchall()
    row_count, values = stats[0], iter(stats[1:])
    described = []
    for name, data_type in columns:
        non_null, distinct = next(values), next(values)
        low, high = (next(values), next(values)) if _has_range(data_type) else (None, None)
        described.append(
            ColumnStats(
                name=name,
                type=data_type,
                null_share=round(1 - non_null / row_count, 4) if row_count else 0.0,
                distinct_count=distinct,
                min=low,
                max=high,
            )
        )
    return TableDescription(
        name=table,
        row_count=row_count,
        columns=described,
        sample_rows=[list(row) for row in sample],
    )


def _has_range(data_type: str) -> bool:
    return data_type.startswith(_NUMERIC_TYPES + _TEMPORAL_TYPES)


def _upload_sources(conn: duckdb.DuckDBPyConnection) -> dict[str, tuple[str, str | None]]:
    exists = _scalar(conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?",
        [_UPLOADS_TABLE],
    ))
    if not exists:
        return {}
    rows = conn.execute(f"SELECT table_name, original_name, sheet FROM {_UPLOADS_TABLE}").fetchall()
    return {name: (original, sheet) for name, original, sheet in rows}


# --- queries ---------------------------------------------------------------------------------


def run_duckdb_query(
    workspace_db: Path | None,
    sql: str,
    *,
    demo_db: Path | None = None,
    row_cap: int = 1000,
    byte_cap: int = 1_000_000,
    timeout_s: float = 30.0,
) -> QueryResult:
    """Run one guarded read-only query over a conversation's tables and the demo data.

    ``workspace_db`` (may be None or not yet exist: no uploads) provides the unqualified tables;
    ``demo_db``, if given, is attached read-only as catalog ``demo`` (``demo.sales``).
    At most ``row_cap`` rows and about ``byte_cap`` bytes of values (their text length) are
    returned; ``truncated`` says whether more existed. Raises :class:`UnsafeSQLError` for
    refused SQL, :class:`QueryTimeout` past ``timeout_s`` and :class:`QueryFailed` for errors
    reported by DuckDB (unknown column, type mismatch …).
    """
    safe_sql = ensure_read_only(sql, "duckdb")
    capped_sql = with_row_limit(safe_sql, row_cap + 1, "duckdb")
    # A conversation without uploads has no workspace file yet: query an in-memory database.
    workspace = Path(workspace_db) if workspace_db is not None else None
    if workspace is not None and not workspace.exists():
        workspace = None
    started = time.monotonic()
    with _workspace_lock(workspace), _query_connection(workspace, demo_db) as conn:
        timer = threading.Timer(timeout_s, conn.interrupt)
        timer.start()
        try:
            cursor = conn.execute(capped_sql)
            columns = [d[0] for d in cursor.description]
            column_types = [str(d[1]) for d in cursor.description]
            rows, truncated = fetch_capped(cursor.fetchmany, row_cap, byte_cap)
        except duckdb.InterruptException as error:
            raise QueryTimeout(
                f"The query was cancelled after {timeout_s:g} s. Aggregate more or filter to "
                f"fewer rows."
            ) from error
        except duckdb.Error as error:
            raise QueryFailed(f"DuckDB error: {_first_line(error)}") from error
        finally:
            timer.cancel()
    return QueryResult(
        sql=safe_sql,
        columns=columns,
        column_types=column_types,
        rows=rows,
        row_count=len(rows),
        truncated=truncated,
        elapsed_ms=round((time.monotonic() - started) * 1000),
    )


def fetch_capped(
    fetchmany: Any, row_cap: int, byte_cap: int, batch_size: int = 500
) -> tuple[list[list[Any]], bool]:
    """Fetch rows through a DB-API ``fetchmany`` until the row or byte cap is reached.

    The byte size of a row is the text length of its values — a cheap, driver-independent
    estimate of what the rows cost once shown to the model. Returns ``(rows, truncated)``.
    """
    rows: list[list[Any]] = []
    used = 0
    while True:
        batch = fetchmany(min(batch_size, row_cap + 1 - len(rows)))
        if not batch:
            return rows, False
        for row in batch:
            if len(rows) == row_cap:
                return rows, True
            used += sum(len(str(value)) for value in row if value is not None)
            if used > byte_cap and rows:
                return rows, True
            rows.append(list(row))


@contextmanager
def _query_connection(
    workspace: Path | None, demo_db: Path | None
) -> Iterator[duckdb.DuckDBPyConnection]:
    target = str(workspace) if workspace is not None else ":memory:"
    try:
        conn = duckdb.connect(target, read_only=workspace is not None, config=DUCKDB_BASE_CONFIG)
    except duckdb.Error as error:
        raise QueryFailed(f"The database could not be opened: {_first_line(error)}") from error
    try:
        try:
            if demo_db is not None:
                conn.execute(f"ATTACH {_sql_string(str(demo_db))} AS {DEMO_CATALOG} (READ_ONLY)")
            # Order matters: attach first, then cut off the file system, then freeze settings.
            conn.execute("SET enable_external_access = false")
            conn.execute("SET lock_configuration = true")
        except duckdb.Error as error:
            raise QueryFailed(
                f"The database could not be prepared: {_first_line(error)}"
            ) from error
        yield conn
    finally:
        conn.close()


@contextmanager
def _read_connection(db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    with _workspace_lock(db_path):
        try:
            conn = duckdb.connect(str(db_path), read_only=True, config=DUCKDB_BASE_CONFIG)
        except duckdb.Error as error:
            raise QueryFailed(f"The database could not be opened: {_first_line(error)}") from error
        try:
            yield conn
        finally:
            conn.close()


_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def _workspace_lock(db_path: Path | None) -> Iterator[None]:
    """Serialize this process's connections to one DuckDB file (see module docstring).

    ``None`` (an in-memory database) needs no lock.
    """
    if db_path is None:
        yield
        return
    key = Path(db_path).resolve()
    with _locks_guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:
        yield


def _main_tables(conn: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main'"
        ).fetchall()
    ]


def quote_identifier(name: str) -> str:
    """Double-quote an identifier for DuckDB/PostgreSQL, escaping embedded quotes."""
    return '"' + name.replace('"', '""') + '"'


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _human_bytes(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


__all__ = [
    "ColumnInfo",
    "ColumnStats",
    "LoadedTable",
    "QueryResult",
    "TableDescription",
    "TableInfo",
    "UploadLimits",
    "describe_table",
    "fetch_capped",
    "list_tables",
    "load_upload",
    "quote_identifier",
    "run_duckdb_query",
    "table_name_for",
    "tables_of_file",
]


def _one_row(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of a query that always returns exactly one (an aggregate without GROUP BY)."""
    row = result.fetchone()
    if row is None:
        raise MalformedUpload("an aggregate query returned no row")
    return row


def _scalar(result: duckdb.DuckDBPyConnection) -> Any:
    return _one_row(result)[0]
