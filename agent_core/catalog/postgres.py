"""Reading a PostgreSQL source's catalog: four catalog queries for any number of tables.

Only what the source's role can read is listed (``USAGE`` on the schema, ``SELECT`` on the
table). Row counts come from ``pg_class.reltuples`` for tables over
:data:`~agent_core.catalog.profiling.EXACT_COUNT_MAX_BYTES` and are counted for smaller ones;
low-cardinality values come from ``pg_stats`` (most-common values of analyzed tables), or are
read from small tables that were never analyzed.
"""

from __future__ import annotations

from typing import Any

from agent_core.catalog.models import CatalogColumn, CatalogTable, ForeignKey
from agent_core.catalog.profiling import (
    EXACT_COUNT_MAX_BYTES,
    SAMPLE_MAX_ROWS,
    Profiler,
    low_cardinality_values,
    quote_double,
)
from agent_core.data.source_config import DataSourceConfig

_TABLES_SQL = """
SELECT c.oid, n.nspname, c.relname, c.relkind, obj_description(c.oid, 'pg_class'),
       CASE WHEN c.relkind = 'p' THEN (
           SELECT sum(greatest(p.reltuples, 0)) FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhrelid
           WHERE i.inhparent = c.oid) ELSE c.reltuples END,
       CASE WHEN c.relkind = 'p' THEN (
           SELECT sum(pg_relation_size(i.inhrelid)) FROM pg_inherits i WHERE i.inhparent = c.oid)
           ELSE pg_relation_size(c.oid) END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%%'
  AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
ORDER BY n.nspname, c.relname
"""
_COLUMNS_SQL = """
SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod),
       col_description(a.attrelid, a.attnum), t.typcategory IN ('S', 'E')
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""
# Declared primary keys and foreign keys, one row per key column (a foreign key's target column
# beside it, matched by position).
_KEYS_SQL = """
SELECT con.conrelid, con.contype, a.attname, fn.nspname, fc.relname, fa.attname
FROM pg_constraint con
CROSS JOIN LATERAL unnest(con.conkey, con.confkey) AS k(attnum, target_attnum)
JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
LEFT JOIN pg_class fc ON fc.oid = con.confrelid
LEFT JOIN pg_namespace fn ON fn.oid = fc.relnamespace
LEFT JOIN pg_attribute fa ON fa.attrelid = con.confrelid AND fa.attnum = k.target_attnum
WHERE con.contype IN ('p', 'f') AND con.conrelid = ANY(%s)
"""
# pg_stats shows only columns the role may read. The anyarray of most-common values becomes
# text[] through its text form.
_STATS_SQL = """
SELECT schemaname, tablename, attname, n_distinct, most_common_vals::text::text[]
FROM pg_stats WHERE schemaname = ANY(%s)
"""


def read_postgres_catalog(cfg: DataSourceConfig, timeout_s: float) -> list[CatalogTable]:
    from agent_core.data.sources import _postgres_connection  # the source's read-only session

    with _postgres_connection(cfg, timeout_s) as conn:
        conn.autocommit = True  # a failed profiling statement must not end the others' transaction
        relations = conn.execute(_TABLES_SQL).fetchall()
        oids = [row[0] for row in relations]
        columns: dict[int, list[tuple[str, str, str | None, bool]]] = {}
        for oid, name, type_name, comment, is_text in conn.execute(_COLUMNS_SQL, [oids]):
            columns.setdefault(oid, []).append((name, type_name, comment, is_text))
        keys: dict[int, dict[str, tuple[bool, ForeignKey | None]]] = {}
        for oid, kind, column, target_schema, target_table, target_column in conn.execute(_KEYS_SQL, [oids]):
            primary, reference = keys.setdefault(oid, {}).get(column, (False, None))
            if kind == "p":
                primary = True
            elif target_table is not None and target_column is not None:
                reference = ForeignKey(schema_name=target_schema, table=target_table, column=target_column)
            keys[oid][column] = (primary, reference)
        schemas = sorted({row[1] for row in relations})
        stats: dict[tuple[str, str], dict[str, tuple[float | None, list[Any] | None]]] = {}
        for schema, table, column, n_distinct, common in conn.execute(_STATS_SQL, [schemas]):
            stats.setdefault((schema, table), {})[column] = (n_distinct, common)

        def fetch(sql: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql).fetchall()

        profiler = Profiler(fetch, quote_double)
        counts = profiler.counts([(row[1], row[2]) for row in relations if _needs_count(row)])
        # Values of small tables the engine has no statistics about, read in batches.
        unsampled = [
            row for row in relations if (row[1], row[2]) not in stats and 0 < (_row_count(row, counts)[0] or 0) <= SAMPLE_MAX_ROWS
        ]
        read = profiler.distinct_values_of(
            [(row[1], row[2], [c[0] for c in columns.get(row[0], []) if c[3]]) for row in unsampled]
        )
        samples = {row[0]: values for row, values in zip(unsampled, read, strict=True)}
        return [
            _table(
                cfg.name,
                row,
                columns.get(row[0], []),
                stats.get((row[1], row[2])),
                keys.get(row[0], {}),
                counts,
                samples.get(row[0], {}),
            )
            for row in relations
        ]


def _row_count(relation: tuple[Any, ...], counts: dict[tuple[str | None, str], int | None]) -> tuple[int | None, bool]:
    """The table's row count and whether it is the engine's estimate."""
    _oid, schema, name, relkind, _comment, reltuples, size = relation
    if relkind not in ("r", "p", "m"):
        return None, False
    if size == 0:  # no pages, no rows (a warehouse's empty staging tables)
        return 0, False
    if _needs_count(relation):
        return counts.get((schema, name)), False
    return int(reltuples), True


def _needs_count(relation: tuple[Any, ...]) -> bool:
    """A table that is neither empty (no pages: no rows) nor big enough for the estimate."""
    _oid, _schema, _name, relkind, _comment, reltuples, size = relation
    if relkind not in ("r", "p", "m") or size == 0:
        return False
    return not (size is not None and size > EXACT_COUNT_MAX_BYTES and reltuples is not None and reltuples >= 0)


def _table(
    source: str,
    relation: tuple[Any, ...],
    columns: list[tuple[str, str, str | None, bool]],
    stats: dict[str, tuple[float | None, list[Any] | None]] | None,
    keys: dict[str, tuple[bool, ForeignKey | None]],
    counts: dict[tuple[str | None, str], int | None],
    read: dict[str, list[str]],
) -> CatalogTable:
    _oid, schema, name, relkind, comment, reltuples, _size = relation
    row_count, estimated = _row_count(relation, counts)
    samples = read
    if stats:
        rows = float(reltuples) if reltuples is not None and reltuples > 0 else float(row_count or 0)
        for column, (n_distinct, common) in stats.items():
            distinct = n_distinct if n_distinct is None or n_distinct >= 0 else -n_distinct * rows
            samples[column] = low_cardinality_values(common, distinct)
    return CatalogTable(
        source=source,
        schema_name=schema,
        name=name,
        kind="view" if relkind == "v" else "table",
        comment=comment,
        row_count=row_count,
        row_count_estimated=estimated,
        columns=[
            CatalogColumn(
                name=column,
                type=type_name,
                comment=column_comment,
                sample_values=samples.get(column, []) if is_text else [],
                primary_key=keys.get(column, (False, None))[0],
                references=keys.get(column, (False, None))[1],
            )
            for column, type_name, column_comment, is_text in columns
        ],
    )
