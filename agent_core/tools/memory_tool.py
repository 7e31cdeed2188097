"""`memory`: the agent records a durable fact the user stated, for later conversations."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.memory import ConversationScope, MemoryFull, MemoryScopeName, MemoryStore
from agent_core.store.tables import ThreadRow
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError

_SCOPE = "memory.scope"


async def conversation_scope(
    sessions: async_sessionmaker[AsyncSession], ctx: ToolContext
) -> ConversationScope | None:
    """Where `ctx`'s conversation lives, from its thread row (None for a thread not in the
    database, e.g. a sub-agent's); cached for the turn in ``ctx.extras``.

    DM-ness and the DM's owner come from the stored thread (set when it was opened), not from
    the message, so a user's memory can only ever load in that user's own DM.
    """
    if _SCOPE not in ctx.extras:
        async with sessions() as session:
            row = (
                await session.exec(
                    select(
                        ThreadRow.platform, ThreadRow.workspace, ThreadRow.channel, ThreadRow.dm_owner
                    ).where(ThreadRow.id == ctx.thread_id)
                )
            ).first()
        scope = None
        if row is not None:
            platform, workspace, channel, dm_owner = row
            scope = ConversationScope(
                platform=platform,
                workspace=workspace,
                channel=channel,
                user=dm_owner or ctx.user,
                is_dm=dm_owner is not None,
            )
        ctx.extras[_SCOPE] = scope
    return ctx.extras[_SCOPE]



class MemoryInput(BaseModel):
    scope: MemoryScopeName = Field(
        ...,
        description="workspace: everyone in this workspace; channel: this channel; user: the "
        "person you are talking to (their own preferences, shown only in their direct messages).",
    )
    fact: str = Field(
        ...,
        min_length=3,
        max_length=500,
        description="One self-contained fact, as you would want to read it months later, e.g. "
        "'GMV excludes refunds and is reported in CNY'.",
    )


class MemoryTool(Tool[MemoryInput]):
    name = "memory"
    description = (
        "Remember a durable fact for future conversations when a user states one: a metric "
        "definition, a naming convention, a standing preference. Do not store one-off requests, "
        "query results, secrets or personal data. In a direct message only scope 'user' is "
        "possible; 'workspace' and 'channel' are for facts stated in a channel."
    )
    Input = MemoryInput

    def __init__(self, store: MemoryStore, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._store = store
        self._sessions = sessions

    async def run(self, args: MemoryInput, ctx: ToolContext) -> str:
        scope = await conversation_scope(self._sessions, ctx)
        if scope is None:
            raise ToolError("memory is not available in this conversation", ErrorType.PERMISSION_DENIED)
        if scope.is_dm and args.scope is not MemoryScopeName.USER:
            # What is said privately must not surface in shared channels.
            raise ToolError(
                "In a direct message facts are kept in the user's own memory: use scope 'user'. "
                "To share a fact with a channel or the workspace, the user can state it there.",
                ErrorType.PERMISSION_DENIED,
            )
        # Scope 'user' always targets the person speaking (the DM's owner in a DM): nobody can
        # write another user's memory.
        try:
            added = await asyncio.to_thread(
                self._store.append_fact,
                scope,
                args.scope,
                args.fact,
                author=ctx.user or "unknown",
                today=datetime.now(UTC).date(),
            )
        except MemoryFull as exc:
            raise ToolError(f"{exc}; ask an operator to tidy it.", ErrorType.RESOURCE_ERROR) from exc
        where = {
            MemoryScopeName.WORKSPACE: "for the whole workspace",
            MemoryScopeName.CHANNEL: "for this channel",
            MemoryScopeName.USER: "in the user's personal memory (direct messages)",
        }[args.scope]
        return f"Remembered {where}: {args.fact}" if added else f"Already remembered {where}."
