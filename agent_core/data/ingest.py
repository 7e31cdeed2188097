"""Ingestion: an uploaded CSV, TSV, Excel (.xlsx), Parquet or JSON file becomes workspace tables.

Each conversation has one DuckDB *workspace* file. :func:`load_upload` turns one uploaded file
into tables there, in one transaction, and records which table came from which file (and which
platform file id) in the workspace's bookkeeping table, so a file loaded again replaces its
tables and a retried delivery loads nothing. Text is decoded (UTF-8, GB18030, then a guess) and
written as UTF-8; an .xlsx becomes one CSV a sheet (`agent_core.data.xlsx`); DuckDB's own
readers then detect the column types. Queries over the result are the engine's
(`agent_core.data.duckdb_engine`).
"""

from __future__ import annotations

import re
import tempfile
import unicodedata
from pathlib import Path

import charset_normalizer
import duckdb
from pydantic import BaseModel, Field

from agent_core.data.duckdb_engine import (
    DUCKDB_BASE_CONFIG,
    UPLOADS_TABLE,
    count_rows,
    first_line,
    quote_identifier,
    read_connection,
    scalar,
    table_columns,
    workspace_lock,
)
from agent_core.data.errors import (
    MalformedUpload,
    UnsupportedUploadType,
    UploadError,
    UploadTooLarge,
)
from agent_core.data.upload_limits import UploadLimits
from agent_core.data.xlsx import xlsx_sheets
from agent_core.units import human_size

_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t", ".txt": None}
_JSON_SUFFIXES = {".json", ".jsonl", ".ndjson"}
_EXCEL_SUFFIXES = {".xlsx", ".xlsm"}
_PARQUET_SUFFIXES = {".parquet", ".pq"}
_MAX_NAME_LENGTH = 48


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
            f"{original_name} is {human_size(size)}; the upload limit is "
            f"{human_size(limits.max_bytes)}. Upload a smaller extract (fewer rows or columns)."
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
    with tempfile.TemporaryDirectory(prefix="ba-upload-") as scratch, workspace_lock(db_path):
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
                f"{original_name} could not be stored: {first_line(error)}"
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
    except Exception as error:  # untrusted content must fail as an UploadError
        raise MalformedUpload(
            f"{original_name} could not be read ({type(error).__name__})."
        ) from error


def _convert_upload(
    file_path: Path, original_name: str, suffix: str, scratch: Path, limits: UploadLimits
) -> list[_Source]:
    if suffix in _PARQUET_SUFFIXES:
        return [_Source(reader_sql="read_parquet($path)", path=str(file_path))]
    if suffix in _EXCEL_SUFFIXES:
        return [
            _Source(
                reader_sql="read_csv($path, header=true, sample_size=-1, delim=',')",
                path=str(sheet.path),
                sheet=sheet.sheet,
                sheet_index=sheet.sheet_index,
            )
            for sheet in xlsx_sheets(file_path, original_name, scratch, limits)
        ]
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
                f"SELECT table_name FROM {UPLOADS_TABLE} WHERE original_name = ?", [original_name]
            ).fetchall()
        ]
        for table in replaced:
            conn.execute(f"DROP TABLE IF EXISTS {quote_identifier(table)}")
        conn.execute(f"DELETE FROM {UPLOADS_TABLE} WHERE original_name = ?", [original_name])
        taken = {name.lower() for name in _main_tables(conn)}
        loaded = []
        for source in sources:
            base = table_name_for(original_name, source.sheet, source.sheet_index, reserved)
            name = _dedupe(base, taken)
            taken.add(name)
            loaded.append(_load_one(conn, source, name, original_name, limits))
            conn.execute(
                f"INSERT INTO {UPLOADS_TABLE} (table_name, original_name, sheet, loaded_at, "
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
    with read_connection(db_path) as conn:
        return _tables_of_file(conn, file_id)


def _ensure_uploads_table(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {UPLOADS_TABLE} (table_name VARCHAR PRIMARY KEY, "
        "original_name VARCHAR NOT NULL, sheet VARCHAR, loaded_at TIMESTAMP NOT NULL, "
        "file_id VARCHAR)"
    )
    # Workspaces created before file ids were recorded.
    conn.execute(f"ALTER TABLE {UPLOADS_TABLE} ADD COLUMN IF NOT EXISTS file_id VARCHAR")


def _tables_of_file(conn: duckdb.DuckDBPyConnection, file_id: str) -> list[LoadedTable]:
    """The tables an earlier load of platform file ``file_id`` created in this workspace."""
    has_column = scalar(conn.execute(
        "SELECT count(*) FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ? AND column_name = 'file_id'",
        [UPLOADS_TABLE],
    ))
    if not has_column:
        return []
    rows = conn.execute(
        f"SELECT table_name, original_name, sheet FROM {UPLOADS_TABLE} WHERE file_id = ? "
        "ORDER BY rowid",
        [file_id],
    ).fetchall()
    tables = []
    for name, original_name, sheet in rows:
        tables.append(
            LoadedTable(
                table_name=name,
                source_file=original_name,
                sheet=sheet,
                row_count=count_rows(conn, name),
                columns=_columns(conn, name),
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
            f"{label} could not be read as a table: {first_line(error)}"
        ) from error
    row_count = count_rows(conn, name)
    if row_count > limits.max_rows:
        raise UploadTooLarge(f"{label} has more than {limits.max_rows:,} rows, the upload limit.")
    if row_count == 0:
        raise MalformedUpload(f"{label} has a header but no data rows.")
    return LoadedTable(
        table_name=name,
        source_file=original_name,
        sheet=source.sheet,
        row_count=row_count,
        columns=_columns(conn, name),
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


def _main_tables(conn: duckdb.DuckDBPyConnection) -> list[str]:
    return [
        row[0]
        for row in conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
            "AND schema_name = 'main'"
        ).fetchall()
    ]


def _columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[ColumnInfo]:
    return [ColumnInfo(name=name, type=typ) for name, typ in table_columns(conn, table)]
