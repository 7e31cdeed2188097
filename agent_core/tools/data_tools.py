"""`list_tables` and `describe_table`: what data the conversation can query, and what it looks like.

Three kinds of tables exist for a conversation:

* uploaded tables: files the user shared here, loaded into the conversation's own DuckDB file
  and queried by their plain name (``orders_2026``);
* demo tables: the shared synthetic demo database, queried as ``demo.<table>``;
* configured data sources: operator databases (``BA_DATASOURCES``), each open only to the
  channels and users on its allowlist, queried with ``sql_query(source=...)`` and described as
  ``<source>:<schema>.<table>``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field
from sqlglot import exp

from agent_core.data.conversation import conversation_database, demo_database
from agent_core.data.demo import DEMO_CATALOG
from agent_core.data.duckdb_engine import TableInfo, describe_table, list_tables
from agent_core.data.errors import DataError, TableNotFound
from agent_core.data.source_config import SQL_DIALECTS, DataSourceConfig
from agent_core.governance.access import DEFAULT_QUERY_TIMEOUT_S, SourceAccess, SourceQueryResult
from agent_core.governance.audience import Identity
from agent_core.governance.enforce import is_source_open
from agent_core.governance.policy import AccessPolicy
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.toolkit.queries import (
    allowed_source,
    data_errors,
    open_source,
    require_open_source,
    usable_sources,
)

if TYPE_CHECKING:  # database drivers load only when a source is described
    from agent_core.data.sources import SourceTableDescription
    from agent_core.governance.audit import AuditTrail
    from agent_core.tools.deps import ToolDeps

MAX_SOURCE_TABLES = 300
_SAMPLE_ROWS = 5
# Leading type keyword (as SQLAlchemy / DuckDB spell it) of columns worth a min/max.
_RANGE_TYPE = re.compile(
    r"^(?:(?:U?(?:TINY|SMALL|MEDIUM|BIG|HUGE)?INT(?:EGER)?\d*)|NUMERIC|DECIMAL|FLOAT\d*|DOUBLE|"
    r"REAL|MONEY|DATE|DATETIME|TIME|TIMESTAMP|YEAR)\b",
    re.IGNORECASE,
)



def build(deps: ToolDeps) -> list[Tool]:
    config = deps.config
    return [
        ListTablesTool(config.datasources, access_policy=config.access_policy),
        DescribeTableTool(config.datasources, access_policy=config.access_policy, access=deps.access),
    ]


# --- results ---------------------------------------------------------------------------------


class SourceSummary(BaseModel):
    """A configured data source this conversation may query."""

    name: str
    kind: str  # postgresql, mysql or duckdb: decides the SQL dialect
    description: str | None = None


class TableListing(BaseModel):
    """Everything the conversation can query."""

    uploaded: list[TableInfo]  # query by plain name
    demo: list[TableInfo]  # names already qualified: demo.sales
    sources: list[SourceSummary]  # query with sql_query(source=name)


class SourceTableEntry(BaseModel):
    name: str  # as written in SQL: schema.table (or just table when there is no schema)
    kind: Literal["table", "view"]


class SourceTableListing(BaseModel):
    """Tables and views of one configured data source."""

    source: str
    kind: str
    tables: list[SourceTableEntry]
    truncated: bool  # more tables exist than were listed; filter with schema_name


class ColumnProfile(BaseModel):
    name: str
    type: str
    null_share: float | None = None  # 0..1; None when statistics were not available
    distinct_count: int | None = None  # approximate; uploads and demo tables only
    min: Any = None  # numbers and dates/times only
    max: Any = None


class TableProfile(BaseModel):
    """Columns, statistics and sample rows of one table."""

    table: str  # the name to use in SQL
    origin: Literal["upload", "demo", "source"]
    source: str | None = None  # the data source to pass to sql_query, for origin "source"
    source_file: str | None = None  # the uploaded file the table came from
    sheet: str | None = None
    row_count: int | None = None
    columns: list[ColumnProfile]
    sample_rows: list[list[Any]]
    notes: list[str] = Field(default_factory=list)


# --- list_tables -----------------------------------------------------------------------------


class ListTablesInput(BaseModel):
    source: str | None = Field(
        None,
        max_length=64,
        description=(
            "Leave empty for the overview: uploaded tables, demo tables and the names of the "
            "data sources available here. Set to a data source name to list that database's "
            "tables and views instead."
        ),
    )
    schema_name: str | None = Field(
        None,
        max_length=128,
        description="With `source`: only list this schema (useful for large databases).",
    )


class ListTablesTool(Tool[ListTablesInput]):
    name = "list_tables"
    description = (
        "List the tables you can query: tables from files uploaded in this conversation (query "
        "them by plain name), the demo tables (demo.*) and the company data sources available "
        "in this conversation. With `source`, list the tables of that data source. Row and "
        "column counts are included; call describe_table for columns."
    )
    Input = ListTablesInput
    timeout_s = 60.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    def __init__(
        self,
        datasources: Mapping[str, DataSourceConfig] | None = None,
        access_policy: AccessPolicy | None = None,
    ) -> None:
        self._datasources = dict(datasources or {})
        self._policy = access_policy

    async def run(self, args: ListTablesInput, ctx: RunContext) -> Any:
        if args.source is not None:
            cfg = allowed_source(self._datasources, args.source, ctx)
            require_open_source(self._policy, cfg.name, ctx)
            return await _list_source(cfg, args.schema_name)
        with data_errors():
            uploaded, demo = await asyncio.gather(
                asyncio.to_thread(list_tables, conversation_database(ctx)),
                asyncio.to_thread(list_tables, demo_database(ctx)),
            )
        return TableListing(
            uploaded=uploaded,
            demo=[t.model_copy(update={"name": f"{DEMO_CATALOG}.{t.name}"}) for t in demo],
            sources=[
                SourceSummary(
                    name=name,
                    kind=self._datasources[name].kind,
                    description=self._datasources[name].description,
                )
                for name in usable_sources(self._datasources, ctx)
                if is_source_open(self._policy, name, Identity.of(ctx))
            ],
        )


async def _list_source(cfg: DataSourceConfig, schema: str | None) -> SourceTableListing:
    from agent_core.data.sources import list_source_tables  # database drivers load on first use

    with data_errors():
        tables = await asyncio.to_thread(list_source_tables, cfg, schema)
    return SourceTableListing(
        source=cfg.name,
        kind=cfg.kind,
        tables=[
            SourceTableEntry(name=_qualified(t.schema_name, t.name), kind=t.kind)
            for t in tables[:MAX_SOURCE_TABLES]
        ],
        truncated=len(tables) > MAX_SOURCE_TABLES,
    )


# --- describe_table --------------------------------------------------------------------------


class DescribeTableInput(BaseModel):
    table: str = Field(
        ...,
        min_length=1,
        max_length=300,
        description=(
            "The table as you would name it: `orders_2026` for an uploaded table, `demo.sales` "
            "for demo data, or `<source>:<schema>.<table>` (schema optional) for a table of a "
            "configured data source, e.g. `warehouse:public.orders`."
        ),
    )


class DescribeTableTool(Tool[DescribeTableInput]):
    name = "describe_table"
    description = (
        "Describe one table before querying it: column names and types, row count, share of "
        "empty values per column, min/max of number and date columns, and a few sample rows. "
        "Works for uploaded tables, demo.* tables and `<source>:<table>` of a data source."
    )
    Input = DescribeTableInput
    timeout_s = 60.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    def __init__(
        self,
        datasources: Mapping[str, DataSourceConfig] | None = None,
        query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
        access_policy: AccessPolicy | None = None,
        audit: AuditTrail | None = None,
        access: SourceAccess | None = None,
    ) -> None:
        # ``access``: the process's one governed path; without it, one over these sources.
        self._access = access or SourceAccess(datasources, access_policy, audit)
        self._query_timeout_s = query_timeout_s

    async def run(self, args: DescribeTableInput, ctx: RunContext) -> Any:
        name = args.table.strip()
        if ":" in name:
            source, _, rest = name.partition(":")
            cfg = await open_source(self._access, source.strip(), ctx, tool=self.name)
            schema, table = _split_qualified(rest)
            with data_errors():
                return await self._access.run(
                    ctx, cfg, lambda query: _profile_source_table(cfg, schema, table, query),
                    tool=self.name, timeout_s=self._query_timeout_s,
                )  # fmt: skip
        schema, table = _split_qualified(name)
        if schema is not None and schema.lower() == DEMO_CATALOG:
            with data_errors():
                return await asyncio.to_thread(_profile_duckdb, demo_database(ctx), table, "demo")
        if schema is not None and schema.lower() != "main":
            raise ToolError(
                f"Unknown table {name!r}: uploaded tables have plain names, demo tables start "
                f"with 'demo.', and data-source tables are written '<source>:<table>'.",
                ErrorType.INVALID_PARAMETERS,
            )
        with data_errors():
            return await asyncio.to_thread(
                _profile_duckdb, conversation_database(ctx), table, "upload"
            )


def _split_qualified(name: str) -> tuple[str | None, str]:
    """``schema.table`` → (schema, table); double quotes around parts are dropped."""
    parts = [p.strip().strip('"').strip("`") for p in name.strip().split(".")]
    if len(parts) == 1 or not all(parts):
        return None, name.strip().strip('"').strip("`")
    if len(parts) == 3 and parts[1] == "main":  # demo.main.sales, DuckDB's catalog.schema.table
        return parts[0], parts[2]
    return parts[0], ".".join(parts[1:])


def _qualified(schema: str | None, table: str) -> str:
    return f"{schema}.{table}" if schema else table


def _profile_duckdb(db_path: Path, table: str, origin: Literal["upload", "demo"]) -> TableProfile:
    """Profile a table of the conversation's DuckDB file or of the demo database."""
    tables = {t.name.lower(): t for t in list_tables(db_path)}
    info = tables.get(table.lower())
    if info is None:
        if origin == "demo":
            available = ", ".join(f"{DEMO_CATALOG}.{n}" for n in sorted(tables)) or "none"
            raise TableNotFound(f"There is no demo table {table!r}. Demo tables: {available}.")
        available = ", ".join(sorted(tables)) or "none (no file has been uploaded here)"
        raise TableNotFound(f"There is no uploaded table {table!r}. Uploaded tables: {available}.")
    described = describe_table(db_path, info.name)
    return TableProfile(
        table=f"{DEMO_CATALOG}.{info.name}" if origin == "demo" else info.name,
        origin=origin,
        source_file=info.source_file,
        sheet=info.sheet,
        row_count=described.row_count,
        columns=[ColumnProfile(**column.model_dump()) for column in described.columns],
        sample_rows=described.sample_rows,
    )


SourceQuery = Callable[[str, int], SourceQueryResult]


def _profile_source_table(
    cfg: DataSourceConfig,
    schema: str | None,
    table: str,
    query: SourceQuery,
) -> TableProfile:
    """Columns from the source's catalog, samples and one aggregate query for statistics.

    The samples and statistics are read through ``query`` (the governed, audited path): under
    an access policy only the columns it leaves visible are described. The statistics query is
    best effort: on a huge table it may time out, and the description is still useful without it.
    """
    from agent_core.data.sources import describe_source_table

    described = describe_source_table(cfg, table, schema)
    sample = query(_sample_sql(cfg, described), _SAMPLE_ROWS)
    visible = set(sample.columns)
    columns = [ColumnProfile(name=c.name, type=c.type) for c in described.columns if c.name in visible]
    sample_rows = sample.rows
    notes = [sample.access_note] if sample.access_note else []
    profile = TableProfile(
        table=_qualified(described.schema_name, described.name),
        origin="source",
        source=cfg.name,
        columns=columns,
        sample_rows=sample_rows,
        notes=notes,
    )
    try:
        stats = query(_stats_sql(cfg, described, columns), 1)
    except DataError as exc:
        profile.notes.append(f"Row count and column statistics are unavailable: {exc}")
        return profile
    values = iter(stats.rows[0])
    row_count = int(next(values))
    profile.row_count = row_count
    for column in columns:
        non_null = int(next(values))
        column.null_share = round(1 - non_null / row_count, 4) if row_count else 0.0
        if _RANGE_TYPE.match(column.type):
            column.min, column.max = next(values), next(values)
    return profile


def _sample_sql(cfg: DataSourceConfig, described: SourceTableDescription) -> str:
    source = exp.table_(described.name, db=described.schema_name, quoted=True)
    return exp.select("*").from_(source).sql(SQL_DIALECTS[cfg.kind])


def _stats_sql(
    cfg: DataSourceConfig, described: SourceTableDescription, columns: list[ColumnProfile]
) -> str:
    """``SELECT count(*), count(c1), [min(c1), max(c1)], …`` built as a syntax tree, so column
    names are always quoted identifiers (they come from the catalog, but may contain anything)."""
    aggregates: list[exp.Expression] = [exp.Count(this=exp.Star())]
    for column in columns:
        ref = exp.column(column.name, quoted=True)
        aggregates.append(exp.Count(this=ref.copy()))
        if _RANGE_TYPE.match(column.type):
            aggregates += [exp.Min(this=ref.copy()), exp.Max(this=ref.copy())]
    source = exp.table_(described.name, db=described.schema_name, quoted=True)
    return exp.select(*aggregates).from_(source).sql(SQL_DIALECTS[cfg.kind])
