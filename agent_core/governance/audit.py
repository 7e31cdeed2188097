"""The audit trail of data access: every attempt to read a configured data source, whatever
became of it.

Each query a tool tries on a configured source is recorded in ``data_access_audit``
(`agent_core.governance.audit_table`): who asked (platform, user) and where (channel), the
source, the tool, the SQL (as it ran after the access-policy rewrite, or as written when it was
refused before), its outcome (succeeded, failed, timed_out, refused), the rows the source
returned, how long it took, the approval that allowed it, and the conversation and tool call it
served. The one path that records is `agent_core.governance.access.SourceAccess`.

Recording costs one INSERT per attempt. It is not best effort: when the INSERT fails, the
query's result is withheld (`AuditUnavailable`), so no data reaches a conversation unaudited.

The daily row limit (``BA_USER_DAILY_ROWS``) lives beside it in the same service database
(`agent_core.governance.budget`).

sqlalchemy is imported inside the functions: a `tool run` over demo data never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

from agent_core.data.errors import DataError
from agent_core.messages import utcnow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession


DEFAULT_LIST_LIMIT = 100
Outcome = Literal["succeeded", "failed", "timed_out", "refused"]
OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed", "timed_out", "refused")


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
    outcome: Outcome = "succeeded"
    error: str | None = None  # the kind of error (QueryFailed, AccessDenied …); its text may carry values


class AuditEntry(DataAccess):
    """A recorded access, as `ba-agent audit` reads it back."""

    id: int
    accessed_at: datetime


class AuditUnavailable(DataError):
    """The audit trail cannot be read or written, so the data is not given out."""


WRITE_FAILED = (
    "The query could not be recorded in the data-access audit trail, so its result is withheld. "
    "Try again shortly; if it keeps failing, an admin should check the service database."
)


class AuditTrail:
    """Records attempts to read data sources, in the service database; ``daily_rows`` (the
    limit per user and UTC day, None: none) is that of the row budget kept beside it, in the same
    database (`agent_core.governance.budget.budget_beside`)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        daily_rows: int | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.sessions = sessions
        self.daily_rows = daily_rows
        self.clock = clock

    async def record(self, access: DataAccess) -> None:
        """Append ``access``; raises `AuditUnavailable` if the database does not take it."""
        from sqlalchemy import insert
        from sqlalchemy.exc import SQLAlchemyError

        from agent_core.governance.audit_table import DataAccessAuditRow

        statement = insert(DataAccessAuditRow.__table__).values(  # type: ignore[attr-defined]
            accessed_at=self.clock(), **access.model_dump()
        )
        try:
            async with self.sessions() as session:
                await (await session.connection()).execute(statement)
                await session.commit()
        except (SQLAlchemyError, OSError) as exc:
            # The statement's values stay out of the log (the engines hide parameters).
            raise AuditUnavailable(WRITE_FAILED) from exc


def audit_trail(
    sessions: async_sessionmaker[AsyncSession], datasources: Mapping[str, object], daily_rows: int | None
) -> AuditTrail | None:
    """The data-access audit trail in the service database (None without data sources: the
    demo data and uploads are the conversation's own, not audited)."""
    if not datasources:
        return None
    return AuditTrail(sessions, daily_rows=daily_rows)


async def read_audit(
    sessions: async_sessionmaker[AsyncSession],
    *,
    since: datetime | None = None,
    user: str | None = None,
    source: str | None = None,
    outcome: Outcome | None = None,
    limit: int = DEFAULT_LIST_LIMIT,
) -> list[AuditEntry]:
    """The latest ``limit`` recorded attempts matching the filters, oldest first.

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
    if outcome is not None:
        query = query.where(col(Row.outcome) == outcome)
    async with sessions() as session:
        rows = (await session.exec(query)).all()
    return [AuditEntry.model_validate(row, from_attributes=True) for row in reversed(rows)]


async def prune_audit(sessions: async_sessionmaker[AsyncSession], retention: timedelta, now: datetime) -> int:
    """Delete the accesses recorded more than ``retention`` before ``now``; returns how many.

    On PostgreSQL the retention is written to ``data_access_audit_retention`` (only the tables'
    owner may) and the cut-off is the database's own clock, the same the table's trigger checks
    each deleted row against (see `agent_core.governance.audit_table`).
    """
    from sqlalchemy import delete, text
    from sqlmodel import col

    from agent_core.governance.audit_table import DataAccessAuditRow as Row

    days = max(1, -(-int(retention.total_seconds()) // 86400))
    async with sessions() as session:
        conn = await session.connection()
        if conn.dialect.name == "postgresql":
            await conn.execute(text("UPDATE data_access_audit_retention SET days = :days WHERE id = 1"), {"days": days})
            cut_off = text("now() - make_interval(days => :days)").bindparams(days=days)
            result = await conn.execute(delete(Row).where(col(Row.accessed_at) < cut_off))
        else:
            result = await conn.execute(delete(Row).where(col(Row.accessed_at) < now - timedelta(days=days)))
        await session.commit()
    return int(result.rowcount)
