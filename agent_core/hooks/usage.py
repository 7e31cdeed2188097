"""Usage accounting: every model call's reported tokens and cost, added to the thread's totals.

The budgets (`agent_core.tokens.budget`) read these totals before each model call, so this
hook is what makes them hold. It counts into ``ctx.turn.usage``: the thread's own usage, or,
in a sub-agent's turn, its parent thread's -- one instance serves the agent and its
sub-agents, so a sub-agent's tokens count in the conversation's usage and budgets. The
compression hook hands it the summarizer's calls too.
"""

from __future__ import annotations

from agent_core.hooks import Hook
from agent_core.model import ModelResponse
from agent_core.run_context import RunContext
from agent_core.tokens.prices import ModelTable
from agent_core.tokens.usage import record_usage


class UsageHook(Hook):
    """Adds each response's reported usage and its list-price cost to the turn's usage."""

    def __init__(self, models: ModelTable | None = None) -> None:
        self.models = models or ModelTable()

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        usage = response.usage
        record_usage(
            ctx.turn.usage,
            self.models.get(response.model),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
