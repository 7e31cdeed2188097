"""Prompt caching: a breakpoint on the system prompt and one on the newest message.

The prefix (tools, system prompt) is byte-stable across turns; the breakpoint on the last
message makes the next call read the whole conversation so far from the cache.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_core.hooks import Hook
from agent_core.messages import StandardMessage
from agent_core.tools.base import ToolContext

EPHEMERAL = {"type": "ephemeral"}


class PromptCachingHook(Hook):
    async def before_model(
        self, request: dict[str, Any], history: list[StandardMessage], ctx: ToolContext
    ) -> dict[str, Any]:
        request = dict(request)
        system = request.get("system")
        if isinstance(system, str):
            request["system"] = [{"type": "text", "text": system, "cache_control": EPHEMERAL}]
        messages = list(request.get("messages", []))
        if messages and messages[-1]["content"]:
            # Copy only the last message: earlier dicts are shared, cached renderings.
            last = copy.deepcopy(messages[-1])
            last["content"][-1]["cache_control"] = EPHEMERAL
            messages[-1] = last
            request["messages"] = messages
        return request
