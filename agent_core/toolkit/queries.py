"""The read paths tools share, with failures as `ToolError`s the model can act on.

The guarded query over the conversation's own data (uploads and demo data) that `sql_query`,
charts, reports, analytics and the demo metrics run through (:func:`query_conversation_data`);
the checks that pick a configured source for a conversation and record a refusal; the plan of
a source query the approval gate shows; and :func:`data_errors`, the one mapping from
data-layer errors to tool errors. Configured sources themselves are read through
`agent_core.governance.access.SourceAccess`, the governed, limited and audited path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from agent_core.data.conversation import conversation_database, demo_database
from agent_core.data.demo import DEMO_CATALOG
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
from agent_core.data.source_config import SQL_DIALECTS, DataSourceConfig, is_allowed
from agent_core.data.sql_guard import ensure_read_only
from agent_core.governance.access import DEFAULT_BYTE_CAP, DEFAULT_QUERY_TIMEOUT_S, SourceAccess
from agent_core.governance.audience import Identity
from agent_core.governance.audit import AuditUnavailable
from agent_core.governance.availability import SourceUnavailable
from agent_core.governance.budget import DailyRowLimitReached
from agent_core.governance.columns import SourceColumns
from agent_core.governance.enforce import enforce, require_source
from agent_core.governance.errors import AccessDenied
from agent_core.governance.policy import AccessPolicy
from agent_core.provenance import UPLOADS_SOURCE, TimeRange, record_query
from agent_core.run_context import RunContext, RunDeps
from agent_core.toolkit.approval_gate import PlannedQuery
from agent_core.toolkit.protocol import ErrorType, ToolError


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
        not_allowed = DataSourceNotAllowed(f"The data source {name!r} is not available in this conversation.")
        raise ToolError(str(not_allowed), ErrorType.PERMISSION_DENIED) from not_allowed
    return cfg


async def open_source(access: SourceAccess, name: str, ctx: RunContext, *, tool: str, sql: str = "") -> DataSourceConfig:
    """`allowed_source` and `require_open_source` together, for a tool about to read ``name``
    through ``access``: a refusal is recorded in the audit trail like any refused attempt."""
    try:
        cfg = allowed_source(access.datasources, name, ctx)
        require_open_source(access.policy, cfg.name, ctx)
    except ToolError as exc:
        if exc.error_type is ErrorType.PERMISSION_DENIED:
            kind = type(exc.__cause__ or exc).__name__
            await access.record_refusal(ctx, name, tool=tool, error=kind, sql=sql)
        raise
    return cfg


def usable_sources(datasources: Mapping[str, DataSourceConfig], ctx: RunDeps) -> list[str]:
    """Names of the configured sources this conversation's channel and user may query."""
    return sorted(n for n, cfg in datasources.items() if is_allowed(cfg, ctx.channel, ctx.user))
