"""`sql_query`: one read-only SQL query over the demo data and the conversation's uploads, or
over an operator-configured data source.

Also home of the guarded query path other tools share (charts and reports run their SQL through
:func:`query_conversation_data`) and of :func:`data_errors`, the one mapping from data-layer
errors to tool errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agent_core.data.errors import (
    DataError,
    DataSourceNotAllowed,
    QueryTimeout,
    SQLParseError,
    TableNotFound,
    UnsafeSQLError,
)
from agent_core.data.result_cap import cap_rows
from agent_core.data.source_config import DataSourceConfig, is_allowed
from agent_core.data.uploads import QueryResult, run_duckdb_query
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError
from agent_core.workspace.local import thread_dir_name

MAX_SQL_CHARS = 20_000
DEFAULT_BYTE_CAP = 1_000_000
DEFAULT_QUERY_TIMEOUT_S = 30.0


def conversation_database(ctx: ToolContext) -> Path:
    """The DuckDB file holding a conversation's uploaded tables (outside the agent's view)."""
    return ctx.data_dir / "workspaces" / thread_dir_name(ctx.thread_id) / "tables.duckdb"


def demo_database(ctx: ToolContext) -> Path:
    """The shared, read-only demo database (``demo.sales``)."""
    return ctx.data_dir / "demo" / "demo.duckdb"


@contextmanager
def data_errors() -> Iterator[None]:
    """Re-raise data-layer errors as ToolErrors whose type tells the model what to do next.

    Their messages are written for the model and the user already (no secrets, no traces).
    """
    try:
        yield
    except SQLParseError as exc:  # a typo, not an attempt to write: the model should fix it
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
    except (UnsafeSQLError, DataSourceNotAllowed) as exc:
        raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc
    except QueryTimeout as exc:
        raise ToolError(str(exc), ErrorType.TIMEOUT) from exc
    except TableNotFound as exc:
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
    except DataError as exc:  # QueryFailed and anything else the database reported
        raise ToolError(str(exc), ErrorType.EXECUTION_ERROR) from exc


async def query_conversation_data(
    ctx: ToolContext,
    sql: str,
    *,
    max_rows: int,
    byte_cap: int = DEFAULT_BYTE_CAP,
    timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
) -> QueryResult:
    """Run one guarded read-only DuckDB query over the conversation's uploads and the demo data.

    Raises ToolError (see :func:`data_errors`).
    """
    with data_errors():
        result = await asyncio.to_thread(
            run_duckdb_query,
            conversation_database(ctx),
            sql,
            demo_db=demo_database(ctx),
            row_cap=max_rows,
            byte_cap=byte_cap,
            timeout_s=timeout_s,
        )
    return capped_result(result, byte_cap)


def capped_result(result: QueryResult, byte_cap: int) -> QueryResult:
    """``result`` bounded to ``byte_cap`` characters of values, its first row included.

    The executors already bound what they fetch; this makes the bound hold for whatever reaches
    the model (a first row larger than the cap is cut, with a note in each cut value).
    """
    rows, cut = cap_rows(result.rows, byte_cap)
    if not cut:
        return result
    return result.model_copy(update={"rows": rows, "row_count": len(rows), "truncated": True})


def allowed_source(
    datasources: Mapping[str, DataSourceConfig], name: str, ctx: ToolContext
) -> DataSourceConfig:
    """The configured source called ``name`` if this conversation may use it.

    Raises ToolError: invalid_parameters for an unknown name (listing the usable ones),
    permission_denied when the source's channel/user allowlist excludes this conversation.
    """
    cfg = datasources.get(name)
    if cfg is None:
        usable = ", ".join(usable_sources(datasources, ctx)) or "none"
        raise ToolError(
            f"There is no data source {name!r}. Data sources available here: {usable}.",
            ErrorType.INVALID_PARAMETERS,
        )
    if not is_allowed(cfg, ctx.channel, ctx.user):
        raise ToolError(
            f"The data source {name!r} is not available in this conversation.",
            ErrorType.PERMISSION_DENIED,
        )
    return cfg


def usable_sources(datasources: Mapping[str, DataSourceConfig], ctx: ToolContext) -> list[str]:
    """Names of the configured sources this conversation's channel and user may query."""
    return sorted(n for n, cfg in datasources.items() if is_allowed(cfg, ctx.channel, ctx.user))


class SqlQueryInput(BaseModel):
    sql: str = Field(
        ...,
        min_length=1,
        max_length=MAX_SQL_CHARS,
        description=(
            "Exactly one read-only SELECT (or WITH … SELECT) statement. Without `source` it runs "
            "on DuckDB: uploaded tables by their plain name, demo data as demo.sales. With "
            "`source`, write it in that database's own dialect (PostgreSQL, MySQL or DuckDB)."
        ),
    )
    max_rows: int = Field(
        200,
        ge=1,
        le=5000,
        description="Most rows to return; the result says `truncated` when more existed.",
    )
    source: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description=(
            "Name of an operator-configured database to query instead of the uploads and demo "
            "data (list_tables shows the names available in this conversation). Leave empty "
            "for uploads and demo data."
        ),
    )


class SqlQueryTool(Tool):
    name = "sql_query"
    description = (
        "Run one read-only SQL query and get the rows back (columns, column types, rows, "
        "truncated). By default it runs on DuckDB over the demo data (`demo.sales`) and the "
        "tables of files uploaded in this conversation (plain names, see list_tables). Set "
        "`source` to query a configured company database instead. Only a single SELECT / WITH "
        "statement is allowed; aggregate in SQL (GROUP BY, SUM, COUNT) rather than fetching "
        "raw rows."
    )
    Input = SqlQueryInput
    timeout_s = 60.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    def __init__(
        self,
        datasources: Mapping[str, DataSourceConfig] | None = None,
        byte_cap: int = DEFAULT_BYTE_CAP,
        query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
    ) -> None:
        self._datasources = dict(datasources or {})
        self._byte_cap = byte_cap
        self._query_timeout_s = query_timeout_s

    async def run(self, args: SqlQueryInput, ctx: ToolContext) -> Any:
        if args.source is None:
            return await query_conversation_data(
                ctx,
                args.sql,
                max_rows=args.max_rows,
                byte_cap=self._byte_cap,
                timeout_s=self._query_timeout_s,
            )
        cfg = allowed_source(self._datasources, args.source, ctx)
        from agent_core.data.sources import query_source  # database drivers load on first use

        with data_errors():
            # The source's own row cap and statement timeout still apply if they are smaller.
            result = await asyncio.to_thread(
                query_source,
                cfg,
                args.sql,
                row_cap=args.max_rows,
                timeout_s=self._query_timeout_s,
                byte_cap=self._byte_cap,
            )
        return capped_result(result, self._byte_cap)
