"""The active skill's context modifier, enforced: allowed tools and model override."""

from __future__ import annotations

from dataclasses import replace

from agent_core.hooks import Hook
from agent_core.messages import StandardMessage, ToolUseBlock
from agent_core.request import ModelRequest
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, ToolResult, error_observation

# Always callable, so an agent inside a narrow skill can still finish it or read its files.
SKILL_META_TOOLS = frozenset({"activate_skill", "finish_skill", "read_skill_file", "todo"})


class SkillPolicyHook(Hook):
    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        # A model override switches models for the turns the skill runs; the prompt cache is
        # per model, so the first call after a switch writes a new cache entry.
        model = ctx.turn.thread.skills.effective_model()
        return replace(request, model=model) if model else request

    async def before_tool(self, call: ToolUseBlock, ctx: RunContext) -> ToolResult | None:
        allowed = ctx.turn.thread.skills.effective_allowed_tools()
        if allowed is None or call.name in allowed or call.name in SKILL_META_TOOLS:
            return None
        chain = " → ".join(ctx.turn.thread.skills.chain)
        message = (
            f"{call.name} is not allowed while the skill {chain} is active "
            f"(allowed: {', '.join(sorted(allowed))}). Finish the skill first to use it."
        )
        return ToolResult(
            tool_use_id=call.id,
            tool_name=call.name,
            observation=error_observation(call, ErrorType.PERMISSION_DENIED, message),
            is_error=True,
            error_type=ErrorType.PERMISSION_DENIED,
        )
