"""Reading a MySQL / MariaDB source's catalog from ``information_schema``.

The source's database (the one its URL names) is listed; ``information_schema`` shows only
what the account may use. ``TABLE_ROWS`` is InnoDB's estimate: tables over
:data:`~agent_core.catalog.profiling.EXACT_COUNT_MAX_BYTES` keep it, smaller ones are counted
and their text columns' distinct values read (MySQL keeps no most-common values to read).
"""

from __future__ import annotations

from typing import Any

from agent_core.catalog.models import CatalogColumn, CatalogTable, ForeignKey
from agent_core.catalog.profiling import (
    EXACT_COUNT_MAX_BYTES,
    SAMPLE_MAX_ROWS,
    TEXT_TYPE,
    Profiler,
    quote_backtick,
)
from agent_core.data.source_config import DataSourceConfig, _sqlalchemy_url

_TABLES_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, TABLE_COMMENT, TABLE_ROWS, DATA_LENGTH "
    "FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME"
)
_COLUMNS_SQL = (
    "SELECT TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, COLUMN_COMMENT FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME, ORDINAL_POSITION"
)

_KEYS_SQL = (
    "SELECT TABLE_NAME, COLUMN_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME, "
    "REFERENCED_COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = %s "
    "AND (CONSTRAINT_NAME = 'PRIMARY' OR REFERENCED_TABLE_NAME IS NOT NULL)"
)
Keys = dict[tuple[str, str], tuple[bool, ForeignKey | None]]


def read_mysql_catalog(cfg: DataSourceConfig, timeout_s: float) -> list[CatalogTable]:
    from agent_core.data.sources import _mysql_connection  # the source's read-only session

    with _mysql_connection(cfg, timeout_s) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT DATABASE()")
        database = cursor.fetchone()[0] or _sqlalchemy_url(cfg).database
        cursor.execute(_TABLES_SQL, [database])
        relations = cursor.fetchall()
        cursor.execute(_COLUMNS_SQL, [database])
        columns: dict[str, list[tuple[str, str, str | None]]] = {}
        for table, name, type_name, comment in cursor.fetchall():
            columns.setdefault(table, []).append((name, type_name, comment or None))

        cursor.execute(_KEYS_SQL, [database])
        keys: Keys = {}
        for table, name, constraint, target_schema, target_table, target_column in cursor.fetchall():
            primary, reference = keys.get((table, name), (False, None))
            if constraint == "PRIMARY":
                primary = True
            else:
                reference = ForeignKey(schema_name=target_schema, table=target_table, column=target_column)
            keys[(table, name)] = (primary, reference)

        def fetch(sql: str) -> list[tuple[Any, ...]]:
            cursor.execute(sql)
            return list(cursor.fetchall())

        profiler = Profiler(fetch, quote_backtick, cast_text="CHAR")
        return [_table(cfg.name, row, columns.get(row[1], []), profiler, keys) for row in relations]


def _table(
    source: str, relation: tuple[Any, ...], columns: list[tuple[str, str, str | None]], profiler: Profiler, keys: Keys
) -> CatalogTable:
    schema, name, table_type, comment, table_rows, data_length = relation
    is_view = table_type == "VIEW"
    row_count: int | None = None
    estimated = False
    if not is_view:
        if data_length is not None and data_length > EXACT_COUNT_MAX_BYTES and table_rows is not None:
            row_count, estimated = int(table_rows), True
        else:
            row_count = profiler.count(schema, name)
    samples: dict[str, list[str]] = {}
    if row_count is not None and 0 < row_count <= SAMPLE_MAX_ROWS:
        samples = profiler.distinct_values(schema, name, [c[0] for c in columns if TEXT_TYPE.search(c[1])])
    return CatalogTable(
        source=source,
        schema_name=schema,
        name=name,
        kind="view" if is_view else "table",
        # MySQL views carry the comment "VIEW"; that says nothing.
        comment=None if is_view or not comment else comment,
        row_count=row_count,
        row_count_estimated=estimated,
        columns=[
            CatalogColumn(
                name=column,
                type=type_name,
                comment=column_comment,
                sample_values=samples.get(column, []),
                primary_key=keys.get((name, column), (False, None))[0],
                references=keys.get((name, column), (False, None))[1],
            )
            for column, type_name, column_comment in columns
        ],
    )
