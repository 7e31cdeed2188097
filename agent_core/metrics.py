"""The agent core's Prometheus metrics: model and tool calls of this process.

Counters and histograms of prometheus-client's default registry. The service runs them in
multiprocess mode (`gateway.service.metrics`), so `/metrics` of a replica sums its serve process and
its workers, and two replicas' figures add up; nothing here reads the database.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

MODEL_CALLS = Counter(
    "ba_agent_model_calls", "Model calls finished by this replica, by model and outcome (ok or error)", ["model", "outcome"]
)
MODEL_ERRORS = Counter(
    "ba_agent_model_errors",
    "Failed model calls (after the SDK's retries) and failed start-up checks, by model and kind: "
    "authentication, not_found, overloaded, unreachable, context_overflow, invalid_request",
    ["model", "kind"],
)
MODEL_DURATION = Histogram(
    "ba_agent_model_call_duration_seconds",
    "Model call duration, streaming included",
    ["model"],
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
MODEL_TOKENS = Counter("ba_agent_model_tokens", "Model tokens by model and type", ["model", "type"])
TOOL_CALLS = Counter("ba_agent_tool_calls", "Tool calls by tool and outcome (ok or error)", ["tool", "outcome"])
TOOL_ERRORS = Counter("ba_agent_tool_errors", "Failed or refused tool calls by tool and error type", ["tool", "error_type"])
TOOL_DURATION = Histogram(
    "ba_agent_tool_call_duration_seconds",
    "Tool call duration",
    ["tool"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
)
