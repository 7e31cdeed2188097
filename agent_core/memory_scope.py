"""Which memory a conversation loads and may write, from its stored thread row."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.memory import ConversationScope
from agent_core.run_context import RunDeps
from agent_core.store.tables import ThreadRow


async def conversation_scope(
    sessions: async_sessionmaker[AsyncSession], deps: RunDeps
) -> ConversationScope | None:
    """Where the conversation of `deps` lives (None for a thread not in the database, e.g. a
    sub-agent's).

    DM-ness and the DM's owner come from the stored thread (set when it was opened), not from
    the message, so a user's memory can only ever load in that user's own DM.
    """
    async with sessions() as session:
        row = (
            await session.exec(
                select(ThreadRow.platform, ThreadRow.workspace, ThreadRow.channel, ThreadRow.dm_owner).where(
                    ThreadRow.id == deps.thread_id
                )
            )
        ).first()
    if row is None:
        return None
    platform, workspace, channel, dm_owner = row
    return ConversationScope(
        platform=platform,
        workspace=workspace,
        channel=channel,
        user=dm_owner or deps.user,
        is_dm=dm_owner is not None,
    )
