"""Reading a DuckDB source's catalog (the file is opened read-only, without external access)."""

from __future__ import annotations

from typing import Any

from agent_core.catalog.models import CatalogColumn, CatalogTable
from agent_core.catalog.profiling import SAMPLE_MAX_ROWS, TEXT_TYPE, Profiler, quote_double
from agent_core.data.source_config import DataSourceConfig, _classify

# DuckDB keeps an exact row count per table (estimated_size) at no cost.
_TABLES_SQL = (
    "SELECT schema_name, table_name, false, comment, estimated_size FROM duckdb_tables() "
    "WHERE database_name = current_database() AND NOT internal "
    "UNION ALL SELECT schema_name, view_name, true, comment, NULL FROM duckdb_views() "
    "WHERE database_name = current_database() AND NOT internal ORDER BY 1, 2"
)
_COLUMNS_SQL = (
    "SELECT schema_name, table_name, column_name, data_type, comment FROM duckdb_columns() "
    "WHERE database_name = current_database() AND NOT internal ORDER BY schema_name, table_name, column_index"
)


def read_duckdb_catalog(cfg: DataSourceConfig) -> list[CatalogTable]:
    import duckdb

    from agent_core.data.duckdb_engine import DUCKDB_BASE_CONFIG

    path = _classify(cfg.url)[1]
    with duckdb.connect(str(path), read_only=True, config=DUCKDB_BASE_CONFIG) as conn:
        relations = conn.execute(_TABLES_SQL).fetchall()
        columns: dict[tuple[str, str], list[tuple[str, str, str | None]]] = {}
        for schema, table, name, type_name, comment in conn.execute(_COLUMNS_SQL).fetchall():
            columns.setdefault((schema, table), []).append((name, type_name, comment))

        def fetch(sql: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql).fetchall()

        profiler = Profiler(fetch, quote_double)
        tables = []
        for schema, name, is_view, comment, size in relations:
            table_columns = columns.get((schema, name), [])
            row_count = None if is_view else int(size)
            samples: dict[str, list[str]] = {}
            if row_count is not None and 0 < row_count <= SAMPLE_MAX_ROWS:
                text_columns = [c[0] for c in table_columns if TEXT_TYPE.search(c[1])]
                samples = profiler.distinct_values(schema, name, text_columns)
            tables.append(
                CatalogTable(
                    source=cfg.name,
                    schema_name=schema,
                    name=name,
                    kind="view" if is_view else "table",
                    comment=comment or None,
                    row_count=row_count,
                    columns=[
                        CatalogColumn(name=c, type=t, comment=cc or None, sample_values=samples.get(c, []))
                        for c, t, cc in table_columns
                    ],
                )
            )
        return tables
