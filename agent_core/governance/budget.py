"""The per-user daily row budget (``BA_USER_DAILY_ROWS``): a hard limit, held by the service
database.

One row per (platform, user, UTC day) in ``data_row_budget`` counts the rows granted to that
user today. A query *reserves* before it runs: one conditional UPDATE grants the rows it may
return, at most what is left, or nothing when the day's rows are used up. A single statement,
so the grant is atomic across the calls of one turn, the processes of one host and the replicas
sharing a PostgreSQL (the row lock on PostgreSQL, the write lock on SQLite). After the query the
reservation is *settled*: what it did not use is given back.

What a query costs: the rows it returned, and at least 1 for every query that reached the
database, failed and timed-out ones included: an error text or a timing can tell as much as a
row, so a probe that fails is not free. The audit trail keeps the rows returned; the budget
keeps what was charged.

sqlalchemy is imported inside the functions: a `tool run` over demo data never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from agent_core.data.errors import DataError
from agent_core.governance.audit import AuditTrail, AuditUnavailable
from agent_core.messages import utcnow

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

# What a query that reached the database costs at least (also a failed or timed-out one).
MIN_QUERY_COST = 1

READ_FAILED = (
    "Today's use of warehouse rows could not be read from the service database, so the query "
    "did not run. Try again shortly; if it keeps failing, an admin should check the service database."
)


class BudgetUnavailable(AuditUnavailable):
    """The row budget cannot be read or written, so the query does not run."""


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


def budget_beside(trail: AuditTrail) -> RowBudget | None:
    """The daily row budget kept in ``trail``'s service database (None without a limit)."""
    if trail.daily_rows is None:
        return None
    return RowBudget(trail.sessions, trail.daily_rows, clock=trail.clock)


@dataclass(frozen=True)
class Reservation:
    """Rows granted to one query before it runs, on one user's budget of one day."""

    platform: str
    user: str
    day: str  # YYYY-MM-DD, UTC
    granted: int


class RowBudget:
    """Reserves and settles rows on each user's daily budget in the service database."""

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], limit: int, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._sessions = sessions
        self.limit = limit
        self._clock = clock

    async def reserve(self, platform: str, user: str, wanted: int | None) -> Reservation:
        """Grant up to ``wanted`` rows (None: all that is left) to one query of ``user`` today.

        Raises `DailyRowLimitReached` when none are left, `BudgetUnavailable` when the budget
        cannot be read.
        """
        from sqlalchemy import and_, case, update
        from sqlalchemy.exc import SQLAlchemyError

        from agent_core.governance.budget_table import DataRowBudgetRow as Row

        now = self._clock()
        day = utc_midnight(now).date().isoformat()
        want = self.limit if wanted is None else max(1, min(wanted, self.limit))
        table = Row.__table__  # type: ignore[attr-defined]
        fits = table.c.used + want <= self.limit
        # Every SET reads the row as it was, so last_grant is what this statement granted.
        grant = (
            update(table)
            .where(
                and_(table.c.platform == platform, table.c.user_id == user, table.c.day == day),
                table.c.used < self.limit,
            )
            .values(
                last_grant=case((fits, want), else_=self.limit - table.c.used),
                used=case((fits, table.c.used + want), else_=self.limit),
            )
            .returning(table.c.last_grant)
        )
        try:
            async with self._sessions() as session:
                conn = await session.connection()
                await conn.execute(_insert_missing(conn.dialect.name, platform, user, day))
                granted = (await conn.execute(grant)).scalar_one_or_none()
                await session.commit()
        except (SQLAlchemyError, OSError) as exc:
            raise BudgetUnavailable(READ_FAILED) from exc
        if not granted:
            raise self.limit_reached(now)
        return Reservation(platform, user, day, int(granted))

    async def settle(self, reservation: Reservation, charged: int) -> None:
        """Give back what ``reservation`` did not use (``charged``: what the query cost).

        Best effort: a refund that cannot be written leaves the user fewer rows today, never more.
        """
        refund = reservation.granted - min(max(charged, 0), reservation.granted)
        if refund <= 0:
            return
        from sqlalchemy import update
        from sqlalchemy.exc import SQLAlchemyError

        from agent_core.governance.budget_table import DataRowBudgetRow as Row

        table = Row.__table__  # type: ignore[attr-defined]
        statement = (
            update(table)
            .where(
                table.c.platform == reservation.platform,
                table.c.user_id == reservation.user,
                table.c.day == reservation.day,
            )
            .values(used=table.c.used - refund)
        )
        try:
            async with self._sessions() as session:
                await (await session.connection()).execute(statement)
                await session.commit()
        except (SQLAlchemyError, OSError):
            return

    async def used_today(self, platform: str, user: str) -> int:
        """Rows charged to ``user`` today (for reports and tests)."""
        from sqlalchemy import select

        from agent_core.governance.budget_table import DataRowBudgetRow as Row

        table = Row.__table__  # type: ignore[attr-defined]
        day = utc_midnight(self._clock()).date().isoformat()
        query = select(table.c.used).where(table.c.platform == platform, table.c.user_id == user, table.c.day == day)
        async with self._sessions() as session:
            used = (await (await session.connection()).execute(query)).scalar_one_or_none()
        return int(used or 0)

    def limit_reached(self, now: datetime | None = None) -> DailyRowLimitReached:
        """The refusal for a user whose rows for today are used up."""
        now = now or self._clock()
        return DailyRowLimitReached(self.limit, utc_midnight(now) + timedelta(days=1) - now)


def _insert_missing(dialect: str, platform: str, user: str, day: str):  # an Insert of either dialect
    """INSERT the day's row at 0 unless it exists (a concurrent insert is no error)."""
    from sqlalchemy.dialects import postgresql, sqlite

    from agent_core.governance.budget_table import DataRowBudgetRow as Row

    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    table = Row.__table__  # type: ignore[attr-defined]
    values = {"platform": platform, "user_id": user, "day": day, "used": 0, "last_grant": 0}
    return insert(table).values(**values).on_conflict_do_nothing()
