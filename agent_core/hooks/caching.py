"""Prompt caching: a breakpoint on the system prompt and one on the newest message.

The prefix (tools, system prompt) is byte-stable across turns; the breakpoint on the last
message makes the next call read the whole conversation so far from the cache.
"""

from __future__ import annotations

from dataclasses import replace

from agent_core.hooks import Hook
from agent_core.messages import StandardMessage
from agent_core.request import ModelRequest
from agent_core.run_context import RunContext


class PromptCachingHook(Hook):
    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        system = request.system
        if system and not any(block.cached for block in system):
            # One breakpoint after the base prompt: every conversation shares that cache entry.
            system = (replace(system[0], cached=True), *system[1:])
        return replace(request, system=system, cache_messages=True)
