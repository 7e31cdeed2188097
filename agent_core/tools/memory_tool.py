"""`memory`: the agent records a durable fact the user stated, for later conversations."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.memory import ConversationScope, MemoryFull, MemoryScopeName, MemoryStore
from agent_core.memory_scope import conversation_scope
from agent_core.run_context import MemoryInPrompt, RunContext
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps


def build(deps: ToolDeps) -> list[Tool]:
    """`memory` keeps its facts in ``deps.memory`` and reads the conversation's scope from the
    service database: without both, it is not offered."""
    if deps.memory is None or deps.sessions is None:
        return []
    return [MemoryTool(deps.memory, deps.sessions)]


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

    async def run(self, args: MemoryInput, ctx: RunContext) -> str:
        scope = await self._scope(ctx)
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

    async def _scope(self, ctx: RunContext) -> ConversationScope | None:
        """The conversation's scope: as the memory hook loaded it for the turn, else looked up
        once and kept for the rest of the turn."""
        if ctx.turn.memory is None:
            ctx.turn.memory = MemoryInPrompt(await conversation_scope(self._sessions, ctx))
        return ctx.turn.memory.scope
