"""The governed, audited path to the configured data sources: one object, built once per
process from the sources, the access policy, the audit trail and the row budget, that every
reader of a configured source goes through (sql_query, describe_table, query_metric, push-down
analytics and charts, monitor runs).

One query on that path, in this order:

0. the source must have passed its privilege check in this process (`agent_core.governance.availability`);
1. the access policy: the source must be open to the asker's audience, and the SQL is rewritten
   so it reads only what that audience may (`agent_core.governance.enforce`); a refusal here,
   or by the SQL guard, is recorded as ``refused`` and nothing runs;
2. the row budget (``BA_USER_DAILY_ROWS``): rows are reserved before the query runs, atomically
   in the service database (`agent_core.governance.budget`); none left is recorded as ``refused``;
3. the query runs on the source, capped at the rows reserved;
4. the reservation is settled: the query is charged the rows it returned, at least 1 for any
   query that reached the database (failed and timed-out ones too), the rest is given back;
5. the attempt is recorded in the audit trail with its outcome (``succeeded``, ``failed``,
   ``timed_out``); when the record cannot be written the result is withheld.

Without an audit trail (no service database: library use, tests) nothing is limited or recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from agent_core.data.duckdb_engine import QueryResult
from agent_core.data.errors import QueryTimeout, UnsafeSQLError
from agent_core.data.interrupt import interruptible
from agent_core.data.source_config import SQL_DIALECTS, DataSourceConfig
from agent_core.governance.audience import Identity
from agent_core.governance.audit import AuditUnavailable, DataAccess, Outcome
from agent_core.governance.availability import SOURCE_CHECKS, SourceChecks
from agent_core.governance.budget import MIN_QUERY_COST, DailyRowLimitReached, Reservation, budget_beside
from agent_core.governance.columns import SourceColumns
from agent_core.governance.enforce import enforce
from agent_core.governance.errors import AccessDenied
from agent_core.governance.policy import AccessPolicy
from agent_core.run_context import RunContext

if TYPE_CHECKING:
    from agent_core.governance.audit import AuditTrail
    from agent_core.governance.budget import RowBudget

DEFAULT_BYTE_CAP = 1_000_000
DEFAULT_QUERY_TIMEOUT_S = 30.0
# How long a query's worker thread waits for the event loop to reserve or record (the loop is
# idle meanwhile; this bounds a thread left behind by a cancelled call).
_LOOP_WAIT_S = 60.0

T = TypeVar("T")
R = TypeVar("R")


class SourceQueryResult(QueryResult):
    """Rows of a configured source; ``access_note`` says how the access policy limited them
    (the pipeline shows it to the model, to pass on to the asker)."""

    access_note: str | None = None
    # True when the policy shaped the answer (a row filter applied, columns hidden): the
    # posted provenance line says so.
    policy_shaped: bool = False


SourceQuery = Callable[[str, int | None], SourceQueryResult]  # (sql, row_cap) → rows, blocking


def governed_source_query(
    cfg: DataSourceConfig,
    sql: str,
    identity: Identity,
    policy: AccessPolicy | None,
    columns: SourceColumns,
    *,
    row_cap: int | None,
    timeout_s: float | None = None,
    byte_cap: int = DEFAULT_BYTE_CAP,
) -> SourceQueryResult:
    """Run ``sql`` on ``cfg`` as the people who will read the answer may see it (blocking),
    neither limited nor audited (`SourceAccess` adds both)."""
    from agent_core.data.sources import query_source  # database drivers load on first use

    enforced = enforce(
        sql, cfg.name, SQL_DIALECTS[cfg.kind], identity, policy=policy, columns=columns.lookup(cfg)
    )
    result = query_source(cfg, enforced.sql, row_cap=row_cap, timeout_s=timeout_s, byte_cap=byte_cap)
    return SourceQueryResult(**result.model_dump(), access_note=enforced.note, policy_shaped=enforced.note is not None)


class SourceAccess:
    """The one governed, limited and audited way to the configured sources."""

    def __init__(
        self,
        datasources: Mapping[str, DataSourceConfig] | None = None,
        policy: AccessPolicy | None = None,
        audit: AuditTrail | None = None,
        budget: RowBudget | None = None,
        checks: SourceChecks = SOURCE_CHECKS,
    ) -> None:
        self.datasources = dict(datasources or {})
        self.checks = checks  # which sources passed their privilege check
        self.policy = policy
        self.audit = audit
        self.budget = budget if budget is not None else (budget_beside(audit) if audit is not None else None)
        self.columns = SourceColumns()  # each table's column names, asked once per process

    async def record_refusal(self, ctx: RunContext, source: str, *, tool: str, error: str, sql: str = "") -> None:
        """Record an attempt refused before any query was built (the source's allowlist or the
        policy closes the source here). The refusal stands even if it cannot be recorded."""
        if self.audit is None:
            return
        identity = Identity.of(ctx)
        refused = DataAccess(
            platform=identity.platform, user_id=identity.user, channel=identity.channel, source=source,
            tool=tool, sql=sql, row_count=0, duration_ms=0.0, thread_id=ctx.thread_id,
            tool_call_id=ctx.tool_call_id, approval_id=ctx.approval_id, outcome="refused", error=error,
        )  # fmt: skip
        try:
            await self.audit.record(refused)
        except AuditUnavailable:
            return

    async def query(
        self,
        ctx: RunContext,
        cfg: DataSourceConfig,
        sql: str,
        *,
        tool: str,
        row_cap: int | None,
        timeout_s: float | None = None,
        byte_cap: int = DEFAULT_BYTE_CAP,
    ) -> SourceQueryResult:
        """One query of ``tool`` on ``cfg`` for the asker of ``ctx`` (see the module docstring)."""
        return await self.run(
            ctx, cfg, lambda query: query(sql, row_cap), tool=tool, timeout_s=timeout_s, byte_cap=byte_cap
        )

    async def run(
        self,
        ctx: RunContext,
        cfg: DataSourceConfig,
        work: Callable[[SourceQuery], T],
        *,
        tool: str,
        timeout_s: float | None = None,
        byte_cap: int = DEFAULT_BYTE_CAP,
    ) -> T:
        """Run ``work`` in a worker thread; each query it makes through the ``query`` it is
        given takes the governed path (policy, budget, execution, audit).

        Raises the data layer's errors: `AccessDenied`, `UnsafeSQLError`, `DailyRowLimitReached`,
        `AuditUnavailable`, `BudgetUnavailable`, and the queries' own.
        """
        # Never a source whose role was not checked to only read, or whose catalog lacks what
        # the policy names.
        await self.checks.ensure(cfg, self.policy.sources.get(cfg.name) if self.policy is not None else None)
        loop = asyncio.get_running_loop()
        identity = Identity.of(ctx)

        def on_loop(coroutine: Coroutine[Any, Any, R]) -> R:
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result(_LOOP_WAIT_S)

        def record(attempt: _Attempt) -> None:
            if self.audit is not None:
                on_loop(self.audit.record(attempt.record()))

        def query(sql: str, row_cap: int | None) -> SourceQueryResult:
            attempt = _Attempt(self, ctx, identity, cfg, tool, sql)
            try:
                result = attempt.run(on_loop, row_cap, timeout_s, byte_cap)
            except Exception:
                try:
                    record(attempt)
                except AuditUnavailable:
                    if attempt.outcome != "refused":
                        raise  # a failed query's error text is withheld like rows would be
                raise
            record(attempt)  # AuditUnavailable withholds the rows
            return result

        # Cancelling the awaiting task (a Stop) cancels the running query too.
        return await interruptible(work, query)


class _Attempt:
    """One query on the governed path, and what became of it (for its audit record)."""

    def __init__(
        self, access: SourceAccess, ctx: RunContext, identity: Identity, cfg: DataSourceConfig, tool: str, sql: str
    ) -> None:
        self._access, self._ctx, self._identity, self._cfg, self._tool = access, ctx, identity, cfg, tool
        self.sql = sql  # as written until the policy has rewritten it
        self.outcome: Outcome = "refused"
        self.error: str | None = None
        self.row_count = 0
        self._started = time.perf_counter()

    def run(
        self,
        on_loop: Callable[[Coroutine[Any, Any, Any]], Any],
        row_cap: int | None,
        timeout_s: float | None,
        byte_cap: int,
    ) -> SourceQueryResult:
        from agent_core.data.sources import DEFAULT_ROW_CAP, query_source  # drivers load on first use

        access, cfg, identity = self._access, self._cfg, self._identity
        try:
            enforced = enforce(
                self.sql, cfg.name, SQL_DIALECTS[cfg.kind], identity,
                policy=access.policy, columns=access.columns.lookup(cfg),
            )  # fmt: skip
        except (AccessDenied, UnsafeSQLError) as exc:
            self.error = type(exc).__name__
            raise
        except Exception as exc:  # e.g. a protected table's columns could not be read
            self.outcome, self.error = "failed", type(exc).__name__
            raise
        self.sql = enforced.sql
        reservation: Reservation | None = None
        wanted = _smallest(row_cap, cfg.row_cap, DEFAULT_ROW_CAP)  # what the executor would return at most
        if access.budget is not None:
            try:
                reservation = on_loop(access.budget.reserve(identity.platform, identity.user, wanted))
            except DailyRowLimitReached as exc:
                self.error = type(exc).__name__
                raise
            assert reservation is not None
            row_cap = reservation.granted
        charged = 0
        try:
            result = query_source(cfg, enforced.sql, row_cap=row_cap, timeout_s=timeout_s, byte_cap=byte_cap)
            charged = max(result.row_count, MIN_QUERY_COST)
        except UnsafeSQLError as exc:  # the executor's own guard: nothing ran
            self.error = type(exc).__name__
            raise
        except QueryTimeout as exc:
            self.outcome, self.error, charged = "timed_out", type(exc).__name__, MIN_QUERY_COST
            raise
        except Exception as exc:
            self.outcome, self.error, charged = "failed", type(exc).__name__, MIN_QUERY_COST
            raise
        finally:
            if reservation is not None and access.budget is not None:
                on_loop(access.budget.settle(reservation, charged))
        self.outcome, self.row_count, self.sql = "succeeded", result.row_count, result.sql
        governed = SourceQueryResult(
            **result.model_dump(), access_note=enforced.note, policy_shaped=enforced.note is not None
        )
        if reservation is not None and result.truncated and reservation.granted < wanted:
            cut = (
                f"only {reservation.granted:,} rows were read: the rest of the asker's daily row limit "
                "(resets at 00:00 UTC)"
            )
            note = f"{enforced.note} Also {cut}." if enforced.note else f"{cut[0].upper()}{cut[1:]}."
            governed = governed.model_copy(update={"access_note": note})
        return governed

    def record(self) -> DataAccess:
        identity, ctx = self._identity, self._ctx
        return DataAccess(
            platform=identity.platform,
            user_id=identity.user,
            channel=identity.channel,
            source=self._cfg.name,
            tool=self._tool,
            sql=self.sql,
            row_count=self.row_count,
            duration_ms=(time.perf_counter() - self._started) * 1000,
            thread_id=ctx.thread_id,
            tool_call_id=ctx.tool_call_id,
            approval_id=ctx.approval_id,
            outcome=self.outcome,
            error=self.error,
        )


def _smallest(*caps: int | None) -> int:
    return min(cap for cap in caps if cap is not None)

