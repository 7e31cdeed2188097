"""The shipped Grafana dashboard queries only metrics that `/metrics` exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack
from tests.harness import gateway_settings, running_gateway

DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana" / "ba-agent-gateway.json"
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 15
    return {name for expr in exprs for name in re.findall(r"\bba_agent_[a-z_]+", expr)}


async def test_every_metric_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(f"sqlite:///{tmp_path / 'ba.db'}", tmp_path / "data", anthropic, slack)
        async with running_gateway(settings) as gw:
            async with gw.http.get(gw.server.make_url("/metrics")) as resp:
                body = await resp.text()
    exported = {
        family.name + suffix
        for family in text_string_to_metric_families(body)
        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))
    }
    queried = queried_metrics()
    assert {
        "ba_agent_http_requests_total",
        "ba_agent_ack_latency_seconds_bucket",
        "ba_agent_turn_duration_seconds_bucket",
        "ba_agent_model_errors_total",
        "ba_agent_tool_errors_total",
        "ba_agent_inbox_pending_events",
        "ba_agent_worker_restarts_total",
    } <= queried
    assert queried - exported == set()
