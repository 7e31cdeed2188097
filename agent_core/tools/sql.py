"""`sql_query`: one read-only SQL query over the demo data and the conversation's uploads, or
over an operator-configured data source.

Also home of the guarded query path over the conversation's own data other tools share (charts
and reports run their SQL through :func:`query_conversation_data`), of the checks that pick a
configured source for a conversation, and of :func:`data_errors`, the one mapping from
data-layer errors to tool errors. Configured sources are read through
`agent_core.data.access.SourceAccess`, the governed, limited and audited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_core.config import SQL_DIALECTS
from agent_core.data.access import (
    DEFAULT_BYTE_CAP,
    DEFAULT_QUERY_TIMEOUT_S,
    SourceAccess,
    SourceQueryResult,
    governed_source_query,
)
from agent_core.data.availability import SourceUnavailable
from agent_core.data.demo import DEMO_CATALOG, demo_database_path
from agent_core.data.duckdb_engine import QueryResult, run_duckdb_query
from agent_core.data.errors import (
    DataError,
    DataSourceNotAllowed,
    QueryTimeout,
    SQLParseError,
    TableNotFound,
    UnsafeSQLError,
)
from agent_core.data.interrupt import interruptible
from agent_core.data.result_cap import cap_rows
from agent_core.data.source_config import DataSourceConfig, is_allowed
from agent_core.data.sql_guard import ensure_read_only
from agent_core.governance.audience import Identity
from agent_core.governance.audit import AuditUnavailable
from agent_core.governance.budget import DailyRowLimitReached
from agent_core.governance.columns import SourceColumns
from agent_core.governance.enforce import enforce, require_source
from agent_core.governance.errors import AccessDenied
from agent_core.governance.policy import AccessPolicy
from agent_core.provenance import UPLOADS_SOURCE, TimeRange, record_query
from agent_core.run_context import RunContext, RunDeps
from agent_core.toolkit.approval_gate import PlannedQuery
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.workspace.local import thread_dir_name

if TYPE_CHECKING:
    from agent_core.governance.audit import AuditTrail

MAX_SQL_CHARS = 20_000
# Re-exported: the tools' modules and the adversarial tests name them here.
__all__ = ["DEFAULT_BYTE_CAP", "DEFAULT_QUERY_TIMEOUT_S", "SourceQueryResult", "governed_source_query"]


TABLES_FILE = "tables.duckdb"


def conversation_database(deps: RunDeps) -> Path:
    """The DuckDB file holding a conversation's uploaded tables (outside the agent's view; with
    workspaces in object storage a local copy, fetched at the start of each turn)."""
    return deps.data_dir / "workspaces" / thread_dir_name(deps.thread_id) / TABLES_FILE


def demo_database(deps: RunDeps) -> Path:
    """The shared, read-only demo database (``demo.sales``)."""
    return demo_database_path(deps.data_dir)


@contextmanager
def data_errors() -> Iterator[None]:
    """Re-raise data-layer errors as ToolErrors whose type tells the model what to do next.

    Their messages are written for the model and the user already (no secrets, no traces).
    """
    try:
        yield
    except SQLParseError as exc:  # a typo, not an attempt to write: the model should fix it
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
    except (UnsafeSQLError, DataSourceNotAllowed, AccessDenied) as exc:
        raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc
    except DailyRowLimitReached as exc:
        retry_after = exc.resets_in.total_seconds()
        raise ToolError(str(exc), ErrorType.PERMISSION_DENIED, code="DAILY_ROW_LIMIT", retry_after_s=retry_after) from exc
    except AuditUnavailable as exc:
        raise ToolError(str(exc), ErrorType.RESOURCE_ERROR, code="AUDIT_UNAVAILABLE") from exc
    except SourceUnavailable as exc:
        raise ToolError(str(exc), ErrorType.RESOURCE_ERROR, code="SOURCE_UNAVAILABLE") from exc
    except QueryTimeout as exc:
        raise ToolError(str(exc), ErrorType.TIMEOUT) from exc
    except TableNotFound as exc:
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
    except DataError as exc:  # QueryFailed and anything else the database reported
        raise ToolError(str(exc), ErrorType.EXECUTION_ERROR) from exc


async def query_conversation_data(
    ctx: RunContext,
    sql: str,
    *,
    max_rows: int,
    byte_cap: int = DEFAULT_BYTE_CAP,
    timeout_s: float = DEFAULT_QUERY_TIMEOUT_S,
    metrics: Sequence[str] = (),
    period: TimeRange | None = None,
) -> QueryResult:
    """Run one guarded read-only DuckDB query over the conversation's uploads and the demo data,
    and record it for the answer's provenance (``metrics`` and ``period``: what a metric query
    computed, over which dates).

    Raises ToolError (see :func:`data_errors`).
    """
    with data_errors():
        result = await interruptible(
            run_duckdb_query,
            conversation_database(ctx),
            sql,
            demo_db=demo_database(ctx),
            row_cap=max_rows,
            byte_cap=byte_cap,
            timeout_s=timeout_s,
            redact_values=False,  # the asker's own uploads and the demo data: nothing to hide
        )
    capped = capped_result(result, byte_cap)
    record_query(
        ctx.turn.data_used,
        capped,
        source=UPLOADS_SOURCE,
        dialect="duckdb",
        catalogs={DEMO_CATALOG: DEMO_CATALOG},  # demo.sales: source demo, table sales
        metrics=metrics,
        period=period,
        call_id=ctx.tool_call_id,
    )
    return capped


def capped_result(result: QueryResult, byte_cap: int) -> QueryResult:
    """``result`` bounded to ``byte_cap`` characters of values, its first row included.

    The executors already bound what they fetch; this makes the bound hold for whatever reaches
    the model (a first row larger than the cap is cut, with a note in each cut value).
    """
    rows, cut = cap_rows(result.rows, byte_cap)
    if not cut:
        return result
    return result.model_copy(update={"rows": rows, "row_count": len(rows), "truncated": True})


async def plan_source_query(
    cfg: DataSourceConfig,
    sql: str,
    ctx: RunDeps,
    policy: AccessPolicy | None,
    columns: SourceColumns,
    metrics: list[str] | None = None,
) -> PlannedQuery | None:
    """``sql`` on ``cfg`` as it would run for ``ctx`` (rewritten by the access policy), for the
    approval gate; None when running it would fail anyway (it then reports why)."""
    if not is_allowed(cfg, ctx.channel, ctx.user):
        return None
    dialect = SQL_DIALECTS[cfg.kind]
    try:
        enforced = await asyncio.to_thread(
            enforce, sql, cfg.name, dialect, Identity.of(ctx), policy=policy, columns=columns.lookup(cfg)
        )
        safe_sql = ensure_read_only(enforced.sql, dialect)  # only one read-only query is explained
    except DataError:
        return None
    return PlannedQuery(source=cfg, sql=safe_sql, dialect=dialect, metrics=list(metrics or []))


def require_open_source(policy: AccessPolicy | None, name: str, ctx: RunDeps) -> None:
    """Raise a permission_denied ToolError if the access policy closes source ``name`` here."""
    if policy is None:
        return
    with data_errors():
        require_source(policy, name, Identity.of(ctx))


def allowed_source(
    datasources: Mapping[str, DataSourceConfig], name: str, ctx: RunContext
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


async def open_source(access: SourceAccess, name: str, ctx: RunContext, *, tool: str, sql: str = "") -> DataSourceConfig:
    """`allowed_source` and `require_open_source` together, for a tool about to read ``name``
    through ``access``: a refusal is recorded in the audit trail like any refused attempt."""
    try:
        cfg = allowed_source(access.datasources, name, ctx)
        require_open_source(access.policy, cfg.name, ctx)
    except ToolError as exc:
        if exc.error_type is ErrorType.PERMISSION_DENIED:
            kind = type(exc.__cause__).__name__ if exc.__cause__ is not None else DataSourceNotAllowed.__name__
            await access.record_refusal(ctx, name, tool=tool, error=kind, sql=sql)
        raise
    return cfg


def usable_sources(datasources: Mapping[str, DataSourceConfig], ctx: RunDeps) -> list[str]:
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
        capped = capped_result(result, self._byte_cap)
        record_query(
            ctx.turn.data_used,
            capped,
            source=cfg.name,
            dialect=SQL_DIALECTS[cfg.kind],
            call_id=ctx.tool_call_id,
            policy_shaped=result.policy_shaped,
        )
        return capped
