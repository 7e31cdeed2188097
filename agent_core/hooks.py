"""What varies around the agent loop, as hooks called in one documented order.

Each hook may look at or change the request before a model call, see the response after it,
and see each tool call before and after it runs. Hooks run in the order they are given to the
loop; `before_*` hooks may rewrite what they receive and return it.
"""

from __future__ import annotations

from typing import Any

from agent_core.messages import StandardMessage, ToolUseBlock
from agent_core.model import ModelResponse
from agent_core.tools.base import ToolContext, ToolResult


class Hook:
    """Base class with no-op defaults; override what you need."""

    async def before_run(self, thread_id: str, history: list[StandardMessage]) -> None:
        """Once per turn, before the first model call."""

    async def before_model(self, request: dict[str, Any], history: list[StandardMessage]) -> dict[str, Any]:
        return request

    async def after_model(self, response: ModelResponse) -> None:
        """After every model call (usage, metrics)."""

    async def before_tool(self, call: ToolUseBlock, ctx: ToolContext) -> ToolResult | None:
        """Return a result to skip running the tool (a refusal, a cached answer)."""
        return None

    async def after_tool(self, call: ToolUseBlock, result: ToolResult) -> ToolResult:
        return result


class TurnObserver:
    """Receives live progress of a turn, to show the user (no-op defaults)."""

    async def on_text(self, delta: str) -> None:
        """A piece of answer text as the model writes it."""

    async def on_text_reset(self) -> None:
        """The model call restarted: discard the text shown so far for this call."""

    async def on_tool_start(self, call: ToolUseBlock) -> None:
        """A tool is about to run."""
