"""`sql_query`: one read-only SQL query over the demo data and the conversation's uploads."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import BaseModel, Field

from agent_core.data.errors import QueryFailed, QueryTimeout, UnsafeSQLError
from agent_core.data.uploads import run_duckdb_query
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError
from agent_core.workspace.local import thread_dir_name

MAX_SQL_CHARS = 20_000


def conversation_database(ctx: ToolContext) -> Path:
    """The DuckDB file holding a conversation's uploaded tables (outside the agent's view)."""
    return ctx.data_dir / "workspaces" / thread_dir_name(ctx.thread_id) / "tables.duckdb"


def demo_database(ctx: ToolContext) -> Path:
    return ctx.data_dir / "demo" / "demo.duckdb"


class SqlQueryInput(BaseModel):
    sql: str = Field(
        ...,
        min_length=1,
        max_length=MAX_SQL_CHARS,
        description="One read-only DuckDB SELECT (or WITH … SELECT) statement.",
    )
    max_rows: int = Field(200, ge=1, le=5000, description="Most rows to return.")


class SqlQueryTool(Tool):
    name = "sql_query"
    description = (
        "Run one read-only SQL query (DuckDB dialect) and get the rows back. Demo data is in "
        "`demo.sales`; tables from files uploaded in this conversation are unqualified. Only a "
        "single SELECT / WITH statement is allowed; aggregate in SQL rather than fetching raw rows."
    )
    Input = SqlQueryInput
    timeout_s = 60.0

    def __init__(self, byte_cap: int = 1_000_000, query_timeout_s: float = 30.0) -> None:
        self._byte_cap = byte_cap
        self._query_timeout_s = query_timeout_s

    async def run(self, args: SqlQueryInput, ctx: ToolContext):  # type: ignore[override]
        try:
            return await asyncio.to_thread(
                run_duckdb_query,
                conversation_database(ctx),
                args.sql,
                demo_db=demo_database(ctx),
                row_cap=args.max_rows,
                byte_cap=self._byte_cap,
                timeout_s=self._query_timeout_s,
            )
        except UnsafeSQLError as exc:
            raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc
        except QueryTimeout as exc:
            raise ToolError(str(exc), ErrorType.TIMEOUT) from exc
        except QueryFailed as exc:
            raise ToolError(str(exc), ErrorType.EXECUTION_ERROR) from exc
