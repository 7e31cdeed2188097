"""Operator-configured data sources (PostgreSQL, MySQL/MariaDB, DuckDB files).

The operator sets ``BA_DATASOURCES`` to a JSON object mapping a source name to its settings::

    {
      "warehouse": {
        "url": "postgresql://reader:secret@db.internal:5432/analytics",
        "description": "Finance warehouse: orders, refunds, daily FX rates",
        "allowed_channels": ["C0123FIN"],
        "allowed_users": null,
        "row_cap": 5000,
        "statement_timeout_s": 20
      },
      "legacy": {"url": "mysql://admin@10.0.0.9/erp", "allow_privileged": true},
      "shop": "mysql://ro@127.0.0.1:3306/shop",
      "archive": {"url": "duckdb:///srv/data/archive.duckdb"}
    }

A bare string is shorthand for ``{"url": ...}``. URLs are SQLAlchemy-style: ``postgresql://``
(also ``postgresql+psycopg://``), ``mysql://`` / ``mariadb://`` (also ``mysql+pymysql://``)
and ``duckdb:///absolute/path.duckdb`` (or a plain path ending in ``.duckdb`` / ``.db``).
``allowed_channels`` / ``allowed_users``: ``null`` or absent means everyone; a list restricts
the source to those chat channel / user ids (both checks must pass). ``allow_privileged``
(default false) accepts a database role that can do more than read — see
:mod:`agent_core.data.privileges`, which refuses such a source at start-up otherwise.

Every query is checked by the SQL guard for the source's dialect and then runs in a session
that is read-only at the database level, so a statement the guard missed still cannot write:

* PostgreSQL (psycopg): ``default_transaction_read_only=on`` and ``statement_timeout`` as
  connection options, plus ``SET TRANSACTION READ ONLY``;
* MySQL / MariaDB (PyMySQL, imported only when such a source is used):
  ``SET SESSION TRANSACTION READ ONLY`` and
  ``START TRANSACTION READ ONLY``; timeout via ``max_execution_time`` (MySQL) or
  ``max_statement_time`` (MariaDB), with a socket read timeout as a backstop;
* DuckDB: a ``read_only=True`` connection without external access (see ``uploads``).

A database error is reported with its class (SQLSTATE, error number, DuckDB's error type) and
its message without values that came from rows (:mod:`agent_core.data.error_text`).

Give the configured database user read-only grants as well: that is the strongest layer, and
:func:`agent_core.governance.availability.verify_sources` checks it at start-up.

Results are bounded by rows and by size (the first row included, see
:mod:`agent_core.data.result_cap`). PostgreSQL rows are streamed (single-row mode, one
statement per call) and MySQL rows read through an unbuffered cursor, so rows past the caps are
never transferred in bulk.
Drivers are blocking; callers run these functions in a worker thread.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import duckdb
import psycopg
import sqlalchemy
from pydantic import BaseModel
from sqlalchemy.pool import NullPool

from agent_core.data.duckdb_engine import DUCKDB_BASE_CONFIG, QueryResult, run_duckdb_query
from agent_core.data.error_text import without_row_values
from agent_core.data.errors import (
    QueryFailed,
    QueryTimeout,
    TableNotFound,
)
from agent_core.data.interrupt import on_interrupt
from agent_core.data.result_cap import cap_rows, fetch_capped
from agent_core.data.source_config import (
    DataSourceConfig,
    SourceKind,
    _classify,
    _sqlalchemy_url,
)
from agent_core.data.sql_guard import ensure_read_only, with_row_limit

DEFAULT_ROW_CAP = 1000
DEFAULT_BYTE_CAP = 1_000_000
DEFAULT_TIMEOUT_S = 30.0
_CONNECT_TIMEOUT_S = 10
_GUARD_DIALECT: dict[SourceKind, str] = {
    "postgresql": "postgres",
    "mysql": "mysql",
    "duckdb": "duckdb",
}
_SYSTEM_SCHEMAS = {
    "information_schema",
    "pg_catalog",
    "pg_toast",
    "mysql",
    "performance_schema",
    "sys",
}
# MySQL error codes of a query that did not run to its end: the statement time limit (MySQL 3024,
# MariaDB 1969), a lost connection after the socket read timeout (2013), and a stop (1317: killed
# by `_mysql_kill_query` when its turn was stopped).
_MYSQL_TIMEOUT_ERRORS = {3024, 1969, 2013, 1317}


class SourceTable(BaseModel):
    schema_name: str | None
    name: str
    kind: Literal["table", "view"]


class SourceColumn(BaseModel):
    name: str
    type: str
    nullable: bool | None = None


class SourceTableDescription(BaseModel):
    schema_name: str | None
    name: str
    columns: list[SourceColumn]


def query_source(
    cfg: DataSourceConfig,
    sql: str,
    row_cap: int | None = None,
    timeout_s: float | None = None,
    byte_cap: int = DEFAULT_BYTE_CAP,
) -> QueryResult:
    """Run one guarded read-only query on a configured source.

    The effective row cap and timeout are the smaller of the argument and the source's own
    setting (defaults: 1000 rows, 30 s). Raises :class:`UnsafeSQLError` for refused SQL,
    :class:`QueryTimeout` and :class:`QueryFailed`.
    """
    rows = int(_smaller(row_cap, cfg.row_cap, DEFAULT_ROW_CAP))
    timeout = _smaller(timeout_s, cfg.statement_timeout_s, DEFAULT_TIMEOUT_S)
    if cfg.kind == "duckdb":
        # run_duckdb_query applies the guard itself and opens the file read-only.
        result = run_duckdb_query(
            _duckdb_path(cfg), sql, row_cap=rows, byte_cap=byte_cap, timeout_s=timeout
        )
        capped, cut = cap_rows(result.rows, byte_cap)
        if not cut:
            return result
        return result.model_copy(
            update={"rows": capped, "row_count": len(capped), "truncated": True}
        )
    dialect = _GUARD_DIALECT[cfg.kind]
    safe_sql = ensure_read_only(sql, dialect)
    # One row past the cap tells whether the result was truncated.
    capped_sql = with_row_limit(safe_sql, rows + 1, dialect)
    result = _execute_on_source(cfg, capped_sql, rows, byte_cap, timeout)
    return result.model_copy(update={"sql": safe_sql})


def list_source_tables(cfg: DataSourceConfig, schema: str | None = None) -> list[SourceTable]:
    """Tables and views of a source (all non-system schemas unless ``schema`` is given)."""
    if cfg.kind == "duckdb":
        return [
            SourceTable(schema_name=schema_name, name=name, kind="view" if is_view else "table")
            for schema_name, name, is_view in _duckdb_rows(
                cfg,
                "SELECT schema_name, table_name, false FROM duckdb_tables() "
                "WHERE database_name = current_database() AND NOT internal "
                "UNION ALL SELECT schema_name, view_name, true FROM duckdb_views() "
                "WHERE database_name = current_database() AND NOT internal ORDER BY 1, 2",
            )
            if schema is None or schema_name == schema
        ]
    with _inspector(cfg) as inspector:
        schemas = [schema] if schema else _user_schemas(cfg, inspector)
        tables = []
        for schema_name in schemas:
            tables += [
                SourceTable(schema_name=schema_name, name=n, kind="table")
                for n in sorted(inspector.get_table_names(schema=schema_name))
            ]
            tables += [
                SourceTable(schema_name=schema_name, name=n, kind="view")
                for n in sorted(inspector.get_view_names(schema=schema_name))
            ]
    return tables


def describe_source_table(
    cfg: DataSourceConfig, table: str, schema: str | None = None
) -> SourceTableDescription:
    """Columns (name, type, nullable) of one table or view, from the catalog: reading rows is
    the caller's, through the governed and audited path.

    The table must exist (checked against the catalog before any SQL is built), so the name
    cannot smuggle SQL. Raises :class:`TableNotFound`.
    """
    known = {(t.schema_name, t.name) for t in list_source_tables(cfg, schema)}
    matches = [key for key in known if key[1] == table and (schema is None or key[0] == schema)]
    if not matches:
        where = f" in schema {schema!r}" if schema else ""
        raise TableNotFound(f"Data source {cfg.name!r} has no table {table!r}{where}.")
    if len(matches) > 1:
        schemas = ", ".join(sorted(str(m[0]) for m in matches))
        raise TableNotFound(f"Table {table!r} exists in several schemas ({schemas}); name one.")
    schema_name, name = matches[0]
    if cfg.kind == "duckdb":
        columns = [
            SourceColumn(name=column, type=data_type, nullable=nullable)
            for column, data_type, nullable in _duckdb_rows(
                cfg,
                "SELECT column_name, data_type, is_nullable FROM duckdb_columns() "
                "WHERE database_name = current_database() AND schema_name = ? AND table_name = ? "
                "ORDER BY column_index",
                [schema_name, name],
            )
        ]
    else:
        with _inspector(cfg) as inspector:
            columns = [
                SourceColumn(name=c["name"], type=str(c["type"]), nullable=c.get("nullable"))
                for c in inspector.get_columns(name, schema=schema_name)
            ]
    return SourceTableDescription(schema_name=schema_name, name=name, columns=columns)


# --- execution -------------------------------------------------------------------------------


def _execute_on_source(
    cfg: DataSourceConfig, sql: str, row_cap: int, byte_cap: int, timeout_s: float
) -> QueryResult:
    """Run ``sql`` in a read-only session WITHOUT the SQL guard or a pushed-down LIMIT
    (callers do both first); ``row_cap`` still bounds what is fetched.

    Kept separate so tests can prove the session itself refuses writes.
    """
    started = time.monotonic()
    if cfg.kind == "postgresql":
        columns, types, rows, truncated = _run_postgres(cfg, sql, row_cap, byte_cap, timeout_s)
    else:
        columns, types, rows, truncated = _run_mysql(cfg, sql, row_cap, byte_cap, timeout_s)
    return QueryResult(
        sql=sql,
        columns=columns,
        column_types=types,
        rows=rows,
        row_count=len(rows),
        truncated=truncated,
        elapsed_ms=round((time.monotonic() - started) * 1000),
    )


_Fetched = tuple[list[str], list[str], list[list[Any]], bool]


def _run_postgres(
    cfg: DataSourceConfig, sql: str, row_cap: int, byte_cap: int, timeout_s: float
) -> _Fetched:
    try:
        with _postgres_connection(cfg, timeout_s) as conn, on_interrupt(conn.cancel_safe):
            conn.execute("SET TRANSACTION READ ONLY")
            cursor = conn.cursor()
            # Single-row mode: rows arrive as fetch_capped asks for them; closing the stream
            # early cancels the rest, so rows past the caps are never transferred or held.
            stream = cast(Generator[Any, None, None], cursor.stream(sql))
            try:
                rows, truncated = fetch_capped(
                    lambda size: list(itertools.islice(stream, size)), row_cap, byte_cap
                )
            finally:
                stream.close()
            description = cursor.description
            if description is None and not rows:
                # Single-row mode leaves no description when there were no rows; LIMIT 0 asks
                # for the columns without running the query again.
                describe = conn.execute(f"SELECT * FROM ({sql}) AS _columns LIMIT 0")
                description = describe.description
            if description is None:
                raise QueryFailed("The statement returned no rows.")
            columns = [d.name for d in description]
            types = [_postgres_type_name(conn, d.type_code) for d in description]
            conn.rollback()  # nothing to keep; ends the read-only transaction cleanly
    except psycopg.errors.QueryCanceled as error:
        raise QueryTimeout(
            f"The query on {cfg.name!r} was cancelled after {timeout_s:g} s. Aggregate more or "
            f"filter to fewer rows."
        ) from error
    except psycopg.Error as error:
        state = f" (SQLSTATE {error.sqlstate})" if error.sqlstate else ""
        message = without_row_values(_first_line(error), sql)
        raise QueryFailed(f"PostgreSQL error on {cfg.name!r}{state}: {message}") from error
    return columns, types, rows, truncated


def _run_mysql(
    cfg: DataSourceConfig, sql: str, row_cap: int, byte_cap: int, timeout_s: float
) -> _Fetched:
    # PyMySQL is imported only here: it is needed only when a MySQL source is configured.
    import pymysql
    import pymysql.cursors

    try:
        with _mysql_connection(cfg, timeout_s) as conn, on_interrupt(_mysql_kill_query(cfg, conn.thread_id())):
            # Unbuffered: rows are read from the socket as fetch_capped asks for them.
            cursor = conn.cursor(pymysql.cursors.SSCursor)
            cursor.execute("START TRANSACTION READ ONLY")
            cursor.execute(sql)
            if cursor.description is None:
                raise QueryFailed("The statement returned no rows.")
            columns = [d[0] for d in cursor.description]
            type_names = _mysql_type_names()
            types = [type_names.get(d[1], str(d[1])) for d in cursor.description]
            rows, truncated = fetch_capped(cursor.fetchmany, row_cap, byte_cap)
            if truncated:
                # Closing an unbuffered cursor reads (and discards) every row left. Abandon the
                # result and drop the connection instead, which also ends the transaction.
                result = getattr(cursor, "_result", None)
                if result is not None:
                    result.unbuffered_active = False
                cursor.close()
                conn.close()
            else:
                cursor.close()
                conn.rollback()
    except pymysql.MySQLError as error:
        code = error.args[0] if error.args and isinstance(error.args[0], int) else None
        if code in _MYSQL_TIMEOUT_ERRORS:
            raise QueryTimeout(
                f"The query on {cfg.name!r} was cancelled after {timeout_s:g} s. Aggregate more "
                f"or filter to fewer rows."
            ) from error
        message = without_row_values(str(error.args[1] if len(error.args) > 1 else error), sql)
        number = f" {code}" if code is not None else ""
        raise QueryFailed(f"MySQL error{number} on {cfg.name!r}: {message}") from error
    return columns, types, rows, truncated


@contextmanager
def _postgres_connection(cfg: DataSourceConfig, timeout_s: float) -> Iterator[psycopg.Connection]:
    url = _sqlalchemy_url(cfg).set(drivername="postgresql")
    options = (
        f"-c default_transaction_read_only=on -c statement_timeout={int(timeout_s * 1000)} "
        f"-c idle_in_transaction_session_timeout={int(timeout_s * 1000) + 5000}"
    )
    try:
        conn = psycopg.connect(
            url.render_as_string(hide_password=False),
            options=options,
            connect_timeout=_CONNECT_TIMEOUT_S,
        )
    except psycopg.Error as error:
        raise QueryFailed(f"Could not connect to {cfg.name!r}: {_first_line(error)}") from error
    try:
        yield conn
    finally:
        conn.close()


def _mysql_kill_query(cfg: DataSourceConfig, thread_id: int) -> Callable[[], None]:
    """The cancel of a stopped turn's query: `KILL QUERY` for its connection, sent on a
    connection of its own (as the same user, who may kill their own queries). It ends the
    statement, not the connection; `on_interrupt` stops sending it once the query is over."""

    def kill() -> None:
        with _mysql_connection(cfg, _CONNECT_TIMEOUT_S) as other, other.cursor() as cursor:
            cursor.execute("KILL QUERY %s", [thread_id])

    return kill


@contextmanager
def _mysql_connection(cfg: DataSourceConfig, timeout_s: float) -> Iterator[Any]:
    """A PyMySQL connection whose session is read-only and time-limited."""
    import pymysql

    url = _sqlalchemy_url(cfg)
    try:
        conn = pymysql.connect(
            host=url.host or "localhost",
            port=url.port or 3306,
            user=url.username or "",
            password=url.password or "",
            database=url.database,
            charset="utf8mb4",
            connect_timeout=_CONNECT_TIMEOUT_S,
            # Backstop if the server-side limit does not apply (e.g. old servers).
            read_timeout=int(timeout_s) + 5,
            autocommit=False,
        )
    except pymysql.MySQLError as error:
        raise QueryFailed(f"Could not connect to {cfg.name!r}: {error.args[-1]}") from error
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            is_mariadb = "mariadb" in str(cursor.fetchone()[0]).lower()
            if is_mariadb:
                cursor.execute("SET SESSION max_statement_time = %s", [float(timeout_s)])
            else:
                cursor.execute("SET SESSION max_execution_time = %s", [int(timeout_s * 1000)])
            cursor.execute("SET SESSION TRANSACTION READ ONLY")
        yield conn
    finally:
        if conn.open:
            conn.close()


@contextmanager
def _inspector(cfg: DataSourceConfig) -> Iterator[sqlalchemy.Inspector]:
    url = _sqlalchemy_url(cfg)
    timeout_s = cfg.statement_timeout_s or DEFAULT_TIMEOUT_S
    if cfg.kind == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
        connect_args: dict[str, Any] = {
            "options": f"-c default_transaction_read_only=on "
            f"-c statement_timeout={int(timeout_s * 1000)}",
            "connect_timeout": _CONNECT_TIMEOUT_S,
        }
    else:
        url = url.set(drivername="mysql+pymysql")
        connect_args = {"connect_timeout": _CONNECT_TIMEOUT_S, "read_timeout": int(timeout_s) + 5}
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=connect_args)
    try:
        with engine.connect() as conn:
            yield sqlalchemy.inspect(conn)
    except sqlalchemy.exc.DBAPIError as error:
        raise QueryFailed(
            f"Could not read the catalog of {cfg.name!r}: {_first_line(error.orig)}"
        ) from error
    finally:
        engine.dispose()


def _user_schemas(cfg: DataSourceConfig, inspector: sqlalchemy.Inspector) -> list[str]:
    if cfg.kind == "mysql":
        # A MySQL "schema" is a database; the URL names the one the source is about.
        database = _sqlalchemy_url(cfg).database
        if database:
            return [database]
    return [
        s
        for s in inspector.get_schema_names()
        if s not in _SYSTEM_SCHEMAS and not s.startswith("pg_")
    ]


def _duckdb_rows(cfg: DataSourceConfig, sql: str, params: list[Any] | None = None) -> list[tuple]:
    """Run catalog SQL (ours, not the model's) on a DuckDB source, read-only."""
    try:
        with duckdb.connect(
            str(_duckdb_path(cfg)), read_only=True, config=DUCKDB_BASE_CONFIG
        ) as conn:
            return conn.execute(sql, params or []).fetchall()
    except duckdb.Error as error:
        raise QueryFailed(f"DuckDB error on {cfg.name!r}: {_first_line(error)}") from error


# --- helpers ---------------------------------------------------------------------------------


def _duckdb_path(cfg: DataSourceConfig) -> Path:
    path = _classify(cfg.url)[1]
    if not path.is_file():
        raise QueryFailed(f"The DuckDB file of data source {cfg.name!r} does not exist.")
    return path


@functools.cache
def _mysql_type_names() -> dict[int, str]:
    """PyMySQL field-type codes to names (DECIMAL, LONG, VAR_STRING …)."""
    from pymysql.constants import FIELD_TYPE

    names: dict[int, str] = {}
    for name, code in vars(FIELD_TYPE).items():
        if name.isupper() and isinstance(code, int):
            # Aliases (CHAR = TINY, INTERVAL = ENUM) come last; keep the primary name.
            names.setdefault(code, name)
    return names


def _postgres_type_name(conn: psycopg.Connection, oid: int) -> str:
    info = conn.adapters.types.get(oid)
    return info.name if info is not None else str(oid)


def _smaller(requested: float | None, configured: float | None, default: float) -> float:
    values = [v for v in (requested, configured) if v is not None]
    return min(values) if values else default


def _first_line(error: BaseException | None) -> str:
    text = str(error).strip() if error is not None else ""
    return text.splitlines()[0] if text else type(error).__name__
