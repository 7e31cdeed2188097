"""`ba-agent stats` and `ba-agent threads`: call counts, durations, success rates and tokens,
and the recent conversations whose ids `stats --thread` takes, from the database."""

from __future__ import annotations

from datetime import datetime
from typing import cast

from sqlalchemy import func, inspect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col, select
from sqlmodel.sql.expression import Select

from agent_core.store.call_stats import call_stats
from agent_core.store.db import create_engine, session_factory
from agent_core.store.tables import MessageRow, ThreadRow
from agent_core.store.threads import ThreadStore
from agent_core.tokens.usage import usage_lines
from gateway.config import Settings


class UnknownThread(Exception):
    """`--thread` names no conversation in this database."""


class NoTablesYet(UnknownThread):
    """The database was never migrated: likely not the one the service uses."""


async def _require_tables(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda sync: inspect(sync).has_table(ThreadRow.__tablename__))
    if not found:
        raise NoTablesYet(
            "this database has no tables yet: is DATABASE_URL (or BA_DATA_DIR) the service's? "
            "`ba-agent serve` or `ba-agent db upgrade` creates them"
        )


async def print_stats(settings: Settings, thread_id: str | None) -> None:
    engine = create_engine(settings.effective_database_url)
    sessions = session_factory(engine)
    try:
        await _require_tables(engine)
        if thread_id is not None:
            async with sessions() as session:
                found = (await session.exec(select(ThreadRow.id).where(ThreadRow.id == thread_id))).first()
            if found is None:
                raise UnknownThread(f"no conversation with id {thread_id!r} (ba-agent threads lists them)")
        stats = await call_stats(sessions, thread_id)
        usage = (await ThreadStore(sessions).load_state(thread_id)).usage if thread_id else None
    finally:
        await engine.dispose()
    scope = f"thread {thread_id}" if thread_id else "all conversations"
    print(f"Calls ({scope})")
    print(
        f"{'kind':6} {'name':24} {'calls':>7} {'failed':>7} {'avg ms':>9} {'success':>8} "
        f"{'in tok':>9} {'out tok':>9} {'cache rd':>9} {'cache wr':>9}"
    )
    for s in stats:
        print(
            f"{s.kind:6} {s.name[:24]:24} {s.calls:7d} {s.failures:7d} {s.avg_duration_ms:9.1f} {s.success_rate:8.0%} "
            f"{s.input_tokens:9d} {s.output_tokens:9d} {s.cache_read_tokens:9d} {s.cache_write_tokens:9d}"
        )
    if not stats:
        print("(no calls recorded yet)")
    if usage is not None:
        print()
        print("\n".join(usage_lines(usage)))


async def print_threads(settings: Settings, limit: int) -> None:
    """The most recently active conversations, newest first."""
    engine = create_engine(settings.effective_database_url)
    sessions = session_factory(engine)
    messages = (
        select(MessageRow.thread_id, func.count().label("n")).group_by(MessageRow.thread_id).subquery()
    )
    # sqlmodel's select() is typed for at most four columns; for more it returns this `Select`,
    # whose constructor cannot infer the row type: it is stated here.
    columns = cast(
        "Select[str, str, str, datetime, datetime | None, int | None]",
        Select(
            col(ThreadRow.id),
            col(ThreadRow.platform),
            col(ThreadRow.channel),
            col(ThreadRow.updated_at),
            col(ThreadRow.archived_at),
            messages.c.n,
        ),
    )
    stmt = (
        columns.outerjoin(messages, messages.c.thread_id == ThreadRow.id)
        .order_by(col(ThreadRow.updated_at).desc())
        .limit(limit)
    )
    try:
        await _require_tables(engine)
        async with sessions() as session:
            rows = (await session.exec(stmt)).all()
    finally:
        await engine.dispose()
    print(f"{'thread id':34} {'platform':9} {'channel':16} {'last active (UTC)':20} {'messages':>8}")
    for thread_id, platform, channel, updated_at, archived_at, count in rows:
        note = " (archived)" if archived_at else ""
        print(f"{thread_id:34} {platform:9} {channel[:16]:16} {updated_at:%Y-%m-%d %H:%M:%S}  {count or 0:8d}{note}")
    if not rows:
        print("(no conversations yet)")
