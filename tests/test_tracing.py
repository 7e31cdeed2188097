"""OpenTelemetry spans for model and tool calls, with token counts and no message bodies."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_core.messages import ToolUseBlock
from agent_core.model import ModelResponse, Usage
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, ToolResult
from agent_core.tracing import TracingHook


async def test_spans_for_model_and_tool_calls(tmp_path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hook = TracingHook(provider.get_tracer("test"))
    ctx = RunContext(thread_id="t1", data_dir=tmp_path)
    await hook.after_model(
        ModelResponse(
            content=[],
            stop_reason="tool_use",
            model="claude-x",
            usage=Usage(input_tokens=10, output_tokens=5, cache_read_tokens=90),
        ),
        ctx,
    )
    call = ToolUseBlock(id="toolu_1", name="sql_query", input={"sql": "SELECT 1"})
    await hook.before_tool(call, ctx)
    await hook.after_tool(
        call,
        ToolResult(tool_use_id="toolu_1", tool_name="sql_query", observation="x", is_error=True, error_type=ErrorType.TIMEOUT),
        ctx,
    )
    model_span, tool_span = exporter.get_finished_spans()
    assert model_span.name == "model.call"
    assert model_span.attributes["gen_ai.usage.input_tokens"] == 10
    assert model_span.attributes["ba.cache_read_tokens"] == 90
    assert tool_span.name == "tool.sql_query" and tool_span.status.description == "timeout"
    assert "secret question" not in str([dict(s.attributes) for s in exporter.get_finished_spans()])
