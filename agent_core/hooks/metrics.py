"""Counting every model and tool call in this process's Prometheus metrics."""

from __future__ import annotations

from agent_core.hooks import Hook
from agent_core.messages import ToolUseBlock
from agent_core.metrics import (
    MODEL_CALLS,
    MODEL_DURATION,
    MODEL_ERRORS,
    MODEL_TOKENS,
    TOOL_CALLS,
    TOOL_DURATION,
    TOOL_ERRORS,
)
from agent_core.model import ModelResponse, ModelUnavailable
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ToolResult


class MetricsHook(Hook):
    """Model calls (outcome, kind of failure, duration, tokens) and tool calls (outcome, error
    type, duration)."""

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        MODEL_CALLS.labels(response.model, "ok").inc()
        MODEL_DURATION.labels(response.model).observe(response.duration_ms / 1000)
        usage = response.usage
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            MODEL_TOKENS.labels(response.model, kind).inc(value)

    async def after_model_error(self, error: ModelUnavailable, ctx: RunContext) -> None:
        model = error.model or "unknown"
        MODEL_CALLS.labels(model, "error").inc()
        MODEL_ERRORS.labels(model, error.kind.value).inc()
        MODEL_DURATION.labels(model).observe(error.duration_ms / 1000)

    async def after_tool(self, call: ToolUseBlock, result: ToolResult, ctx: RunContext) -> ToolResult:
        TOOL_CALLS.labels(call.name, "error" if result.is_error else "ok").inc()
        if result.is_error:
            TOOL_ERRORS.labels(call.name, result.error_type.value if result.error_type else "unknown").inc()
        TOOL_DURATION.labels(call.name).observe(result.duration_ms / 1000)
        return result
