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
from typing import Any

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.hooks import Hook
from agent_core.hooks.caching import EPHEMERAL
from agent_core.memory import MemoryStore
from agent_core.messages import StandardMessage
from agent_core.tools.base import ToolContext
from agent_core.tools.memory_tool import conversation_scope

_SECTION = "memory.section"


def with_memory(request: dict[str, Any], section: str) -> dict[str, Any]:
    """A copy of `request` whose system prompt is [base (cache breakpoint), memory]."""
    system = request.get("system") or ""
    if isinstance(system, str):
        # The caching hook marks a plain-string system prompt; once it is a list that is ours.
        blocks = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
    else:
        blocks = list(system)
    return {**request, "system": [blocks[0], {"type": "text", "text": section}, *blocks[1:]]}


class MemoryHook(Hook):
    """Loads the conversation's memory once per turn and puts it after the base prompt."""

    def __init__(self, store: MemoryStore, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._store = store
        self._sessions = sessions

    async def before_run(self, history: list[StandardMessage], ctx: ToolContext) -> None:
        scope = await conversation_scope(self._sessions, ctx)
        section = await asyncio.to_thread(self._store.section, scope) if scope else ""
        ctx.extras[_SECTION] = section

    async def before_model(
        self, request: dict[str, Any], history: list[StandardMessage], ctx: ToolContext
    ) -> dict[str, Any]:
        section = ctx.extras.get(_SECTION)
        return with_memory(request, section) if section else request
