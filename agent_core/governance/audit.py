"""The audit trail of data access, and the per-user daily row limit computed from it.

Every query a tool runs on a configured data source is recorded in ``data_access_audit``
(`agent_core.governance.audit_table`): who asked (platform, user) and where (channel), the
source, the SQL as it ran (after the access-policy rewrite), the rows the source returned, how
long it took, the approval that allowed it, and the conversation and tool call it served. The
tools record through `agent_core.tools.sql.audited_source_query`, the one governed query path.

Recording costs one INSERT per access, on the event loop's database connection. It is not
best effort: when the INSERT fails, the query's result is withheld (`AuditUnavailable`), so no
data reaches a conversation unaudited.

``BA_USER_DAILY_ROWS`` limits the rows each user's queries may bring back per UTC day: the
audit rows of that user since 00:00 UTC are summed (one indexed query per access, only when a
limit is set). Rows *returned* are counted, not rows scanned: the databases do not report
scanned rows cheaply. Each query is also capped at the rows left, so a user ends the day at
most at the limit (queries running at the same moment may together pass it slightly).

sqlalchemy is imported inside the functions: a `tool run` over demo data never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from pydantic import BaseModel

from agent_core.data.errors import DataError
from agent_core.messages import utcnow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

DEFAULT_LIST_LIMIT = 100


class DataAccess(BaseModel):
    """One access to a configured data source, as the audit trail records it."""

    platform: str  # "" outside any chat (an operator's `tool run`)
    user_id: str
    channel: str
    source: str
    tool: str
    sql: str  # as executed, after the access-policy rewrite
    row_count: int  # rows the source returned
    duration_ms: float
    thread_id: str
    tool_call_id: str
    approval_id: str | None = None


class AuditEntry(DataAccess):
    """A recorded access, as `ba-agent audit` reads it back."""

    id: int
    accessed_at: datetime


class AuditUnavailable(DataError):
    """The audit trail cannot be read or written, so the data is not given out."""


WRITE_FAILED = (
    "The query ran, but it could not be recorded in the data-access audit trail, so its result "
    "is withheld. Try again shortly; if it keeps failing, an admin should check the service database."
)
READ_FAILED = (
    "Today's use of warehouse rows could not be read from the data-access audit trail, so the "
    "query did not run. Try again shortly; if it keeps failing, an admin should check the service database."
)


class DailyRowLimitReached(DataError):
    """The user has read their daily allowance of warehouse rows."""

    def __init__(self, limit: int, resets_in: timedelta) -> None:
        hours, rest = divmod(int(resets_in.total_seconds()), 3600)
        super().__init__(
            f"You have used today's {limit:,} rows of warehouse data; the limit resets at "
            f"00:00 UTC (in {hours} h {rest // 60} min). Tell the user; an admin can raise it "
            "(BA_USER_DAILY_ROWS)."
        )
        self.limit = limit
        self.resets_in = resets_in


def utc_midnight(now: datetime) -> datetime:
    """The start of ``now``'s UTC day."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


class AuditTrail:
    """Records data accesses and answers how many rows a user has left today."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        daily_rows: int | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._sessions = sessions
        self.daily_rows = daily_rows
        self._clock = clock

    async def rows_left(self, platform: str, user: str) -> int | None:
        """Rows ``user`` may still read today (None: no limit); raises `DailyRowLimitReached`
        when none are left, `AuditUnavailable` when the trail cannot be read."""
        if self.daily_rows is None:
            return None
        from sqlalchemy import func, select
        from sqlalchemy.exc import SQLAlchemyError
        from sqlmodel import col

        from agent_core.governance.audit_table import DataAccessAuditRow as Row

        now = self._clock()
        used_today = select(func.coalesce(func.sum(Row.row_count), 0)).where(
            col(Row.platform) == platform, col(Row.user_id) == user, col(Row.accessed_at) >= utc_midnight(now)
        )
        try:
            async with self._sessions() as session:
                used = int((await (await session.connection()).execute(used_today)).scalar_one())
        except (SQLAlchemyError, OSError) as exc:
            raise AuditUnavailable(READ_FAILED) from exc
        if used >= self.daily_rows:
            raise self.limit_reached(now)
        return self.daily_rows - used

    def limit_reached(self, now: datetime | None = None) -> DailyRowLimitReached:
        """The refusal for a user whose rows for today are used up (a limit must be set)."""
        assert self.daily_rows is not None
        now = now or self._clock()
        return DailyRowLimitReached(self.daily_rows, utc_midnight(now) + timedelta(days=1) - now)

    async def record(self, access: DataAccess) -> None:
        """Append ``access``; raises `AuditUnavailable` if the database does not take it."""
        from sqlalchemy import insert
        from sqlalchemy.exc import SQLAlchemyError

        from agent_core.governance.audit_table import DataAccessAuditRow

        statement = insert(DataAccessAuditRow.__table__).values(  # type: ignore[attr-defined]
            accessed_at=self._clock(), **access.model_dump()
        )
        try:
            async with self._sessions() as session:
                await (await session.connection()).execute(statement)
                await session.commit()
        except (SQLAlchemyError, OSError) as exc:
            # The statement's values stay out of the log (the engines hide parameters).
            raise AuditUnavailable(WRITE_FAILED) from exc


async def read_audit(
    sessions: async_sessionmaker[AsyncSession],
    *,
    since: datetime | None = None,
    user: str | None = None,
    source: str | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
) -> list[AuditEntry]:
    """The latest ``limit`` recorded accesses matching the filters, oldest first.

    ``user`` is a user id, or ``platform:user`` for one platform's user.
    """
    from sqlmodel import col, select

    from agent_core.governance.audit_table import DataAccessAuditRow as Row

    query = select(Row).order_by(col(Row.id).desc()).limit(limit)
    if since is not None:
        query = query.where(col(Row.accessed_at) >= since)
    if user is not None:
        platform, separator, user_id = user.rpartition(":")
        query = query.where(col(Row.user_id) == user_id)
        if separator:
            query = query.where(col(Row.platform) == platform)
    if source is not None:
        query = query.where(col(Row.source) == source)
    async with sessions() as session:
        rows = (await session.exec(query)).all()
    return [AuditEntry.model_validate(row, from_attributes=True) for row in reversed(rows)]


async def prune_audit(sessions: async_sessionmaker[AsyncSession], before: datetime) -> int:
    """Delete the accesses recorded before ``before`` (the retention); returns how many.

    On PostgreSQL the transaction first declares its cut-off, the one DELETE the table's
    append-only trigger lets through (see `agent_core.governance.audit_table`).
    """
    from sqlalchemy import delete, text
    from sqlmodel import col

    from agent_core.governance.audit_table import DataAccessAuditRow as Row

    async with sessions() as session:
        conn = await session.connection()
        if conn.dialect.name == "postgresql":
            await conn.execute(
                text("SELECT set_config('ba_agent.audit_prune_before', :before, true)"),
                {"before": before.astimezone(UTC).isoformat()},
            )
        result = await conn.execute(delete(Row).where(col(Row.accessed_at) < before))
        await session.commit()
    return int(result.rowcount)
