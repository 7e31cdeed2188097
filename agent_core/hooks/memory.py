"""Memory in the prompt: a second system block after the stable base prompt.

The base system prompt is built once per agent and is the same for every conversation, so it
stays one cacheable block (with its own breakpoint: all conversations share that cache entry).
Memory differs per conversation, so it goes in a second system block right after it. It is read
once per turn and does not change within the turn (a fact recorded during the turn is in the
conversation already), so the prefix stays byte-identical across the calls of a turn, and
across turns for as long as the memory files do not change.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.hooks import Hook
from agent_core.memory import MemoryStore
from agent_core.memory_scope import conversation_scope
from agent_core.messages import StandardMessage
from agent_core.request import ModelRequest, SystemBlock
from agent_core.run_context import MemoryInPrompt, RunContext


def with_memory(request: ModelRequest, section: str) -> ModelRequest:
    """A copy of `request` whose system prompt is [base (cache breakpoint), memory, …]."""
    base, *rest = request.system
    return replace(request, system=(replace(base, cached=True), SystemBlock(section), *rest))


class MemoryHook(Hook):
    """Loads the conversation's memory once per turn and puts it after the base prompt."""

    def __init__(self, store: MemoryStore, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._store = store
        self._sessions = sessions

    async def before_run(self, history: list[StandardMessage], ctx: RunContext) -> None:
        scope = await conversation_scope(self._sessions, ctx)
        section = await asyncio.to_thread(self._store.section, scope) if scope else ""
        ctx.turn.memory = MemoryInPrompt(scope, section)

    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        memory = ctx.turn.memory
        return with_memory(request, memory.section) if memory and memory.section else request
