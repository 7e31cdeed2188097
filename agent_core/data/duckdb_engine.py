"""The DuckDB query engine: guarded read-only queries over a conversation's workspace file.

Each conversation has one DuckDB *workspace* file (ingestion fills it: `agent_core.data.ingest`).
:func:`list_tables` and :func:`describe_table` inspect any DuckDB file (the workspace or the
demo database); :func:`run_duckdb_query` runs a guarded, read-only, time- and size-capped query.

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
workspace file holds this module's per-file lock (:func:`workspace_lock`); across processes
DuckDB's own file lock applies and a conflicting access fails with :class:`QueryFailed` /
:class:`UploadError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel

from agent_core.data.demo import DEMO_CATALOG
from agent_core.data.error_text import without_row_values
from agent_core.data.errors import MalformedUpload, QueryFailed, QueryTimeout, TableNotFound
from agent_core.data.interrupt import on_interrupt
from agent_core.data.sql_guard import ensure_read_only, with_row_limit

# Never let DuckDB fetch an extension at run time: the machine has no internet, and a query
# must not be able to pull code in. Parquet and JSON are built into the Python wheel.
DUCKDB_BASE_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}

# Bookkeeping table in each workspace: which table came from which uploaded file.
UPLOADS_TABLE = "_ba_uploads"
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


# --- inspection ------------------------------------------------------------------------------


def list_tables(db_path: Path) -> list[TableInfo]:
    """Tables of a DuckDB file (its ``main`` schema), without internal bookkeeping tables."""
    db_path = Path(db_path)
    if not db_path.exists():
        return []
    with read_connection(db_path) as conn:
        sources = _upload_sources(conn)
        rows = conn.execute(
            "SELECT table_name, estimated_size, column_count FROM duckdb_tables() "
            "WHERE database_name = current_database() AND schema_name = 'main' "
            "AND NOT starts_with(table_name, '_') ORDER BY table_name"
        ).fetchall()
        tables = []
        for name, _, column_count in rows:
            source_file, sheet = sources.get(name, (None, None))
            tables.append(
                TableInfo(
                    name=name,
                    row_count=count_rows(conn, name),
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
    with read_connection(db_path) as conn:
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
        columns = table_columns(conn, table)
        aggregates = ["count(*)"]
        for name, data_type in columns:
            col = quote_identifier(name)
            aggregates += [f"count({col})", f"approx_count_distinct({col})"]
            if _has_range(data_type):
                aggregates += [f"min({col})", f"max({col})"]
        stats = one_row(conn.execute(f"SELECT {', '.join(aggregates)} FROM {quoted}"))
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
    exists = scalar(conn.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?",
        [UPLOADS_TABLE],
    ))
    if not exists:
        return {}
    rows = conn.execute(f"SELECT table_name, original_name, sheet FROM {UPLOADS_TABLE}").fetchall()
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
    redact_values: bool = True,
) -> QueryResult:
    """Run one guarded read-only query over a conversation's tables and the demo data.

    ``workspace_db`` (may be None or not yet exist: no uploads) provides the unqualified tables;
    ``demo_db``, if given, is attached read-only as catalog ``demo`` (``demo.sales``).
    At most ``row_cap`` rows and about ``byte_cap`` bytes of values (their text length) are
    returned; ``truncated`` says whether more existed. Raises :class:`UnsafeSQLError` for
    refused SQL, :class:`QueryTimeout` past ``timeout_s`` and :class:`QueryFailed` for errors
    reported by DuckDB (unknown column, type mismatch …), whose message keeps no value from
    the rows unless ``redact_values`` is False (the asker's own uploads).
    """
    # A conversation without uploads has no workspace file yet: query an in-memory database.
    workspace = Path(workspace_db) if workspace_db is not None else None
    if workspace is not None and not workspace.exists():
        workspace = None
    started = time.monotonic()
    with workspace_lock(workspace), _query_connection(workspace, demo_db) as connecting:
        # DuckDB builds its database instance without the GIL (~20 ms) while the guard reads
        # the SQL; nothing runs on the connection before the guard has passed it.
        safe_sql = ensure_read_only(sql, "duckdb")
        capped_sql = with_row_limit(safe_sql, row_cap + 1, "duckdb")
        conn = connecting.result()
        timer = threading.Timer(timeout_s, conn.interrupt)
        timer.start()
        try:
            with on_interrupt(conn.interrupt):  # a stopped turn stops its query
                cursor = conn.execute(capped_sql)
                columns = [d[0] for d in cursor.description]
                column_types = [str(d[1]) for d in cursor.description]
                rows, truncated = _fetch_rows(cursor.fetchmany, row_cap, byte_cap)
        except duckdb.InterruptException as error:
            raise QueryTimeout(
                f"The query was cancelled after {timeout_s:g} s. Aggregate more or filter to "
                f"fewer rows."
            ) from error
        except duckdb.Error as error:
            message = first_line(error)
            if redact_values:
                message = without_row_values(message, capped_sql)
            raise QueryFailed(f"DuckDB error: {message}") from error
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


def _fetch_rows(
    fetchmany: Any, row_cap: int, byte_cap: int, batch_size: int = 500
) -> tuple[list[list[Any]], bool]:
    """Fetch rows through a DB-API ``fetchmany`` until the row or byte cap is reached.

    The byte size of a row is the text length of its values — a cheap, driver-independent
    estimate of what the rows cost once shown to the model. Returns ``(rows, truncated)``.
    The first row is kept whole however large: callers bound it with
    :func:`agent_core.data.result_cap.cap_rows`, whose note then tells its true size.
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
def _query_connection(workspace: Path | None, demo_db: Path | None) -> Iterator[Future[duckdb.DuckDBPyConnection]]:
    """The query's connection, opened in a thread: its future (closed on leaving, whatever
    happened meanwhile)."""
    with ThreadPoolExecutor(max_workers=1) as opener:
        connecting = opener.submit(_open_query_connection, workspace, demo_db)
        try:
            yield connecting
        finally:
            if connecting.exception() is None:
                connecting.result().close()


def _open_query_connection(workspace: Path | None, demo_db: Path | None) -> duckdb.DuckDBPyConnection:
    target = str(workspace) if workspace is not None else ":memory:"
    try:
        conn = duckdb.connect(target, read_only=workspace is not None, config=DUCKDB_BASE_CONFIG)
    except duckdb.Error as error:
        raise QueryFailed(f"The database could not be opened: {first_line(error)}") from error
    try:
        if demo_db is not None:
            conn.execute(f"ATTACH {_sql_string(str(demo_db))} AS {DEMO_CATALOG} (READ_ONLY)")
        # Order matters: attach first, then cut off the file system, then freeze settings.
        conn.execute("SET enable_external_access = false")
        conn.execute("SET lock_configuration = true")
    except duckdb.Error as error:
        conn.close()
        raise QueryFailed(f"The database could not be prepared: {first_line(error)}") from error
    return conn


@contextmanager
def read_connection(db_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    with workspace_lock(db_path):
        try:
            conn = duckdb.connect(str(db_path), read_only=True, config=DUCKDB_BASE_CONFIG)
        except duckdb.Error as error:
            raise QueryFailed(f"The database could not be opened: {first_line(error)}") from error
        try:
            yield conn
        finally:
            conn.close()


_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


@contextmanager
def workspace_lock(db_path: Path | None) -> Iterator[None]:
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


# --- small helpers shared with ingestion -----------------------------------------------------


def table_columns(conn: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    """(name, type) of each column of a table in the ``main`` schema, in order."""
    return conn.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = "
        "current_database() AND schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()


def count_rows(conn: duckdb.DuckDBPyConnection, table: str) -> int:
    # A count(*) is cheap in DuckDB (duckdb_tables().estimated_size is not exact).
    return int(scalar(conn.execute(f"SELECT count(*) FROM {quote_identifier(table)}")))


def quote_identifier(name: str) -> str:
    """Double-quote an identifier for DuckDB/PostgreSQL, escaping embedded quotes."""
    return '"' + name.replace('"', '""') + '"'


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def one_row(result: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of a query that always returns exactly one (an aggregate without GROUP BY)."""
    row = result.fetchone()
    if row is None:
        raise MalformedUpload("an aggregate query returned no row")
    return row


def scalar(result: duckdb.DuckDBPyConnection) -> Any:
    return one_row(result)[0]
