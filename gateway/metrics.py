"""`GET /metrics`: the call aggregates in Prometheus text format."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent_core.store.call_stats import CallStats


class _Snapshot:
    """A collector over aggregates computed beforehand (the database query is async)."""

    def __init__(self, stats: list[CallStats], open_events: int, feedback: dict[str, int] | None) -> None:
        self._stats = stats
        self._open_events = open_events
        self._feedback = feedback or {}

    def collect(self) -> Iterator[Metric]:
        labels = ["kind", "name"]
        calls = CounterMetricFamily("ba_agent_calls", "Model and tool calls", labels=labels)
        duration = GaugeMetricFamily("ba_agent_call_duration_ms_avg", "Average call duration (ms)", labels=labels)
        success = GaugeMetricFamily("ba_agent_call_success_ratio", "Share of successful calls", labels=labels)
        tokens = CounterMetricFamily("ba_agent_tokens", "Model tokens", labels=["name", "type"])
        for s in self._stats:
            calls.add_metric([s.kind, s.name], s.calls)
            duration.add_metric([s.kind, s.name], s.avg_duration_ms)
            success.add_metric([s.kind, s.name], s.success_rate)
            if s.kind == "model":
                for kind, value in (
                    ("input", s.input_tokens),
                    ("output", s.output_tokens),
                    ("cache_read", s.cache_read_tokens),
                    ("cache_write", s.cache_write_tokens),
                ):
                    tokens.add_metric([s.name, kind], value)
        inbox = GaugeMetricFamily("ba_agent_inbox_open_events", "Accepted events not yet answered")
        inbox.add_metric([], self._open_events)
        feedback = GaugeMetricFamily(
            "ba_agent_answer_feedback", "Current 👍 (helpful) and 👎 (not_helpful) ratings of answers", labels=["rating"]
        )
        for rating, count in sorted(self._feedback.items()):
            feedback.add_metric([rating], count)
        yield from (calls, duration, success, tokens, inbox, feedback)


def render_metrics(stats: list[CallStats], open_events: int, feedback: dict[str, int] | None = None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(stats, open_events, feedback))
    return generate_latest(registry)
