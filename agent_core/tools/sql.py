"""`sql_query`: one read-only SQL query over the demo data and the conversation's uploads, or
over an operator-configured data source (through `agent_core.governance.access.SourceAccess`, the
governed, limited and audited path)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_core.data.source_config import SQL_DIALECTS, DataSourceConfig
from agent_core.governance.access import DEFAULT_BYTE_CAP, DEFAULT_QUERY_TIMEOUT_S, SourceAccess, SourceQueryResult
from agent_core.governance.policy import AccessPolicy
from agent_core.provenance import record_query
from agent_core.run_context import RunContext
from agent_core.toolkit.approval_gate import PlannedQuery
from agent_core.toolkit.protocol import NotedResult, Tool
from agent_core.toolkit.queries import capped_result, data_errors, open_source, plan_source_query, query_conversation_data

if TYPE_CHECKING:
    from agent_core.governance.audit import AuditTrail
    from agent_core.tools.deps import ToolDeps


MAX_SQL_CHARS = 20_000


def build(deps: ToolDeps) -> list[Tool]:
    config = deps.config
    return [SqlQueryTool(config.datasources, access_policy=config.access_policy, access=deps.access)]


class SourceRows(SourceQueryResult, NotedResult):
    """Rows of a configured source; the access policy's note, if any, is shown to the model to
    pass on to the asker."""


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
        "raw rows. When a result says the access policy limited it, tell the user so in your answer."
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
        access_policy: AccessPolicy | None = None,
        audit: AuditTrail | None = None,
        access: SourceAccess | None = None,
    ) -> None:
        # ``access``: the process's one governed path; without it, one over these sources.
        self._access = access or SourceAccess(datasources, access_policy, audit)
        self._byte_cap = byte_cap
        self._query_timeout_s = query_timeout_s

    async def plan_query(self, args: SqlQueryInput, ctx: RunContext) -> PlannedQuery | None:
        """What the call would run on a configured source (the approval gate asks this);
        None for the uploads and demo data."""
        access = self._access
        cfg = access.datasources.get(args.source) if args.source is not None else None
        if cfg is None:
            return None
        return await plan_source_query(cfg, args.sql, ctx, access.policy, access.columns)

    async def run(self, args: SqlQueryInput, ctx: RunContext) -> Any:
        if args.source is None:
            return await query_conversation_data(
                ctx,
                args.sql,
                max_rows=args.max_rows,
                byte_cap=self._byte_cap,
                timeout_s=self._query_timeout_s,
            )
        cfg = await open_source(self._access, args.source, ctx, tool=self.name, sql=args.sql)
        # The source's own row cap and statement timeout still apply if they are smaller.
        with data_errors():
            result = await self._access.query(
                ctx,
                cfg,
                args.sql,
                tool=self.name,
                row_cap=args.max_rows,
                timeout_s=self._query_timeout_s,
                byte_cap=self._byte_cap,
            )
        capped = SourceRows.model_construct(**dict(capped_result(result, self._byte_cap)))
        record_query(
            ctx.turn.data_used,
            capped,
            source=cfg.name,
            dialect=SQL_DIALECTS[cfg.kind],
            call_id=ctx.tool_call_id,
            policy_shaped=result.policy_shaped,
        )
        return capped
