"""Optional OpenTelemetry tracing of model calls and tool calls (off unless configured).

The hook uses only the OpenTelemetry API; `configure_tracing` (which needs the `otel` extra:
opentelemetry-sdk and the OTLP exporter) installs a sampled tracer provider that exports over
OTLP/HTTP. Spans carry names, durations, token counts and error types — never message bodies.
"""

from __future__ import annotations

import time

from opentelemetry import trace

from agent_core.hooks import Hook
from agent_core.messages import ToolUseBlock
from agent_core.model import ModelResponse
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ToolResult

TRACER_NAME = "ba_agent"


class TracingHook(Hook):
    """One span per model call and per tool call, under the current (turn) span."""

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        self._tracer = tracer or trace.get_tracer(TRACER_NAME)
        self._tool_spans: dict[str, trace.Span] = {}

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        # The span is made once the call is over, dated back by the call's measured duration:
        # no span has to be carried from before the call to after it, and a call that fails
        # leaves no half-open span behind.
        end = time.time_ns()
        span = self._tracer.start_span(
            "model.call",
            attributes={"ba.thread_id": ctx.thread_id},
            start_time=end - int(response.duration_ms * 1_000_000),
        )
        usage = response.usage
        span.set_attributes(
            {
                "gen_ai.request.model": response.model,
                "gen_ai.response.finish_reason": response.stop_reason or "",
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "ba.cache_read_tokens": usage.cache_read_tokens,
                "ba.cache_write_tokens": usage.cache_write_tokens,
                "ba.attempts": response.attempts,
            }
        )
        span.end(end_time=end)

    async def before_tool(self, call: ToolUseBlock, ctx: RunContext) -> ToolResult | None:
        self._tool_spans[call.id] = self._tracer.start_span(
            f"tool.{call.name}", attributes={"ba.tool": call.name, "ba.thread_id": ctx.thread_id}
        )
        return None

    async def after_tool(self, call: ToolUseBlock, result: ToolResult, ctx: RunContext) -> ToolResult:
        span = self._tool_spans.pop(call.id, None)
        if span is not None:
            span.set_attributes({"ba.success": not result.is_error, "ba.retries": result.retries})
            if result.is_error and result.error_type is not None:
                span.set_status(trace.Status(trace.StatusCode.ERROR, result.error_type.value))
            span.end()
        return result


def configure_tracing(endpoint: str, sample_rate: float, service: str, environment: str) -> None:
    """Export sampled spans to an OTLP/HTTP collector at `endpoint` (needs the `otel` extra)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "deployment.environment": environment}),
        sampler=ParentBased(TraceIdRatioBased(sample_rate)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)
