"""What varies around the agent loop, as hooks called in one documented order.

A hook may look at or change the request before a model call, see the response after it, and
see each tool call before and after it runs. The loop calls hooks in list order; `before_*`
hooks may return a changed copy of what they receive (the request is a typed, frozen
`ModelRequest`: hooks agree on its shape, and the API body is made from it at the edge). A
hook does one thing. The standard chain is assembled in `agent_core.agent.build_agent`, in
this order (each entry says what it is for):

1. memory          — durable facts as a second, stable system block
2. skills          — allowed-tools enforcement and model override of the active skill
   (files — large tool results go to files — and sub-agents — the `task` tool — are tools,
   handled by the tool pipeline, so they have no hook of their own)
3. compression     — prune, then summarize, to keep the context under its threshold
4. refocus         — restate the goal, active skill and open todos every few rounds; after
                     compression, which rebuilds the message list (context only, never posted)
5. prompt caching  — cache breakpoints so each call reads the previous conversation from cache
6. dangling patch  — answer an interrupted tool_use with a "cancelled" tool_result (before run)
7. usage           — count every model call's tokens and cost in the thread's usage, which the
                     budgets read (sub-agents share it: their calls count in their parent's)
8. telemetry       — record every model and tool call (database)
9. metrics         — count every model and tool call in this process's Prometheus metrics
10. tracing        — OpenTelemetry spans of model and tool calls (a no-op unless configured)
"""

from __future__ import annotations

from agent_core.messages import StandardMessage, ToolUseBlock
from agent_core.model import ModelResponse, ModelUnavailable
from agent_core.request import ModelRequest
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ToolResult


class Hook:
    """Base class with no-op defaults; override what you need."""

    async def before_run(self, history: list[StandardMessage], ctx: RunContext) -> None:
        """Once per turn, before the first model call."""

    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        return request

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        """After every model call (usage, metrics)."""

    async def after_model_error(self, error: ModelUnavailable, ctx: RunContext) -> None:
        """After a model call that failed for good (the SDK's retries included)."""

    async def before_tool(self, call: ToolUseBlock, ctx: RunContext) -> ToolResult | None:
        """Return a result to skip running the tool (a refusal, a cached answer)."""
        return None

    async def after_tool(self, call: ToolUseBlock, result: ToolResult, ctx: RunContext) -> ToolResult:
        return result

    async def on_context_overflow(
        self, history: list[StandardMessage], ctx: RunContext, prompt_tokens: int | None, limit: int | None
    ) -> bool:
        """The API said the request was too long; return True if the next request will be shorter."""
        return False


class TurnObserver:
    """Receives live progress of a turn, to show the user (no-op defaults)."""

    async def on_text(self, delta: str) -> None:
        """A piece of answer text as the model writes it."""

    async def on_text_reset(self) -> None:
        """The model call restarted: discard the text shown so far for this call."""

    async def on_tool_start(self, call: ToolUseBlock) -> None:
        """A tool is about to run."""

    async def on_tool_end(self, call: ToolUseBlock, result: ToolResult) -> None:
        """A tool finished (`result.is_error` when it failed or was refused)."""
