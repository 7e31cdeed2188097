"""Token budgets: per conversation (in memory) and per user per calendar day (one query)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import column, func
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.config import BudgetConfig
from agent_core.i18n import Language, t
from agent_core.state import ThreadUsage
from agent_core.store.tables import CallRecordRow
from agent_core.tokens.prices import budget_tokens


def day_bounds(now: datetime, timezone: str) -> tuple[datetime, datetime]:
    """Start and end (UTC) of `now`'s calendar day in `timezone` (23 or 25 h on DST days)."""
    midnight = now.astimezone(ZoneInfo(timezone)).replace(hour=0, minute=0, second=0, microsecond=0)
    # Aware-datetime arithmetic is wall-clock arithmetic: +1 day is the next local midnight.
    return midnight.astimezone(UTC), (midnight + timedelta(days=1)).astimezone(UTC)


async def user_tokens_since(sessions: async_sessionmaker[AsyncSession], user: str, since: datetime) -> int:
    """Budget tokens of every model call made for `user` since `since`, across threads.

    Needs the ``call_records.user_id`` column (indexed with ``started_at``) written by the
    telemetry hook from ``RunContext.user``.
    """
    row = CallRecordRow
    stmt = select(
        func.coalesce(func.sum(row.input_tokens), 0),
        func.coalesce(func.sum(row.output_tokens), 0),
        func.coalesce(func.sum(row.cache_write_tokens), 0),
        func.coalesce(func.sum(row.cache_read_tokens), 0),
    ).where(row.kind == "model", column("user_id") == user, row.started_at >= since)
    async with sessions() as session:
        tin, tout, cw, cr = (await session.exec(stmt)).one()
    return budget_tokens(int(tin), int(tout), int(cw), int(cr))


async def check_budget(
    config: BudgetConfig,
    *,
    usage: ThreadUsage,
    user: str | None = None,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    now: datetime | None = None,
    language: Language = Language.EN,
) -> str | None:
    """The message to post instead of calling the model when a budget is used up, else None.

    Call before each model call of a turn (the conversation total is in memory; the per-user
    daily total costs one indexed query, so a caller may check it once per turn).
    """
    if config.per_conversation_tokens is not None:
        used = budget_tokens(
            usage.input_tokens, usage.output_tokens, usage.cache_write_tokens, usage.cache_read_tokens
        )
        if used >= config.per_conversation_tokens:
            return t(
                language,
                "This conversation has used its token budget ({used} of {limit} tokens), so I've "
                "stopped here. Start a new thread to continue, or ask an admin to raise the limit.",
                used=f"{used:,}",
                limit=f"{config.per_conversation_tokens:,}",
            )
    if config.per_user_daily_tokens is not None and user and sessions is not None:
        now = now or datetime.now(UTC)
        start, resets = day_bounds(now, config.timezone)
        used = await user_tokens_since(sessions, user, start)
        if used >= config.per_user_daily_tokens:
            hours, rest = divmod(int((resets - now).total_seconds()), 3600)
            return t(
                language,
                "You've used today's token budget ({used} of {limit} tokens), so I've stopped here. "
                "It resets at midnight {timezone} (in {hours} h {minutes} min); an admin can raise "
                "the limit.",
                used=f"{used:,}",
                limit=f"{config.per_user_daily_tokens:,}",
                timezone=config.timezone,
                hours=hours,
                minutes=rest // 60,
            )
    return None
