"""A wrong API key or model name: found at start-up, told truthfully to users, counted.

The gateway runs in-process (`BA_WORKER_PROCESSES=0`) against the fake Anthropic API, which
answers an unknown key with 401 authentication_error and an unknown model with 404
not_found_error on every endpoint, as the real one does. Counters are process-wide, so every
test compares /metrics before and after.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent_core.config import AgentConfig
from agent_core.model_check import check_model
from agent_core.store.call_stats import call_stats
from tests.fakes.anthropic_api import FakeAnthropic, HttpError, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import Gateway, gateway_settings, running_gateway
from tests.waiting import Deadline

THREAD = "1700000001.000100"


def metric(body: str, sample: str, **labels: str) -> float:
    """The sum of the samples named `sample` whose labels include `labels` (0 when absent)."""
    return sum(
        s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


async def scrape(gw: Gateway) -> str:
    async with gw.http.get(gw.server.make_url("/metrics")) as resp:
        assert resp.status == 200
        return await resp.text()


async def model_check_done(gw: Gateway) -> dict:
    deadline = Deadline(10)
    while not deadline.passed():
        _, body = await gw.get_json("/readyz")
        if body["model"]["state"] != "pending":
            return body
        await asyncio.sleep(0.05)
    raise TimeoutError("the model check did not finish")


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as fake:
        yield fake


async def ask(gw: Gateway, slack: FakeSlack, question: str) -> str:
    assert (await gw.post_event(app_mention(f"<@UBOT> {question}", "U1", "C1", ts=THREAD))).status == 200
    await gw.settled(timeout=30)
    [reply] = slack.posted(channel="C1", thread_ts=THREAD)
    return str(reply.get("markdown_text") or reply.get("text"))


async def test_a_wrong_key_is_reported_at_start_up_told_to_the_user_and_counted(
    tmp_path: Path, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeAnthropic(api_keys={"the-right-key"}) as anthropic:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'ba.db'}", tmp_path / "data", anthropic, slack, ANTHROPIC_API_KEY="a-wrong-key"
        )
        async with running_gateway(settings) as gw:
            before = await scrape(gw)
            ready = await model_check_done(gw)
            assert ready["ok"] is True  # still acknowledging events
            assert ready["model"] == {"state": "rejected", "detail": "ANTHROPIC_API_KEY was rejected (401)"}
            assert [r.path for r in anthropic.model_requests] == ["/v1/models/claude-sonnet-5-5"]
            reply = await ask(gw, slack, "how did GMV do last week?")
            after = await scrape(gw)
            stats = await call_stats(gw.runtime.sessions)
    assert reply.startswith("Sorry, I can't answer: the bot is misconfigured")
    assert "An admin has been told" in reply and "can't reach" not in reply
    assert any(
        r.levelname == "ERROR" and "ANTHROPIC_API_KEY was rejected" in r.getMessage() for r in caplog.records
    )
    kind = {"model": "claude-sonnet-5-5", "kind": "authentication"}
    # One from the start-up check, one from the user's turn.
    assert metric(after, "ba_agent_model_errors_total", **kind) - metric(before, "ba_agent_model_errors_total", **kind) == 2
    [model] = [s for s in stats if s.kind == "model"]
    assert (model.name, model.calls, model.failures) == ("claude-sonnet-5-5", 1, 1)


async def test_an_unknown_model_name_is_reported_and_a_chinese_user_is_told_in_chinese(
    tmp_path: Path, slack: FakeSlack
) -> None:
    async with FakeAnthropic(models={"claude-sonnet-5-5"}) as anthropic:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'ba.db'}", tmp_path / "data", anthropic, slack, BA_MODEL="claude-sonet-5-5"
        )
        async with running_gateway(settings) as gw:
            before = await scrape(gw)
            ready = await model_check_done(gw)
            reply = await ask(gw, slack, "上周华东区的 GMV 怎么样？")
            after = await scrape(gw)
    assert ready["model"]["state"] == "rejected"
    assert ready["model"]["detail"] == "BA_MODEL 'claude-sonet-5-5' does not exist at this endpoint (404)"
    assert reply.startswith("抱歉，我无法回答：机器人的配置有误")
    kind = {"model": "claude-sonet-5-5", "kind": "not_found"}
    assert metric(after, "ba_agent_model_errors_total", **kind) - metric(before, "ba_agent_model_errors_total", **kind) == 2


async def test_an_overloaded_model_is_not_called_a_misconfiguration(tmp_path: Path, slack: FakeSlack) -> None:
    async with FakeAnthropic() as anthropic:
        anthropic.script(*[HttpError(529, retry_after=0.01)] * 3)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'ba.db'}", tmp_path / "data", anthropic, slack)
        async with running_gateway(settings) as gw:
            ready = await model_check_done(gw)
            before = await scrape(gw)
            reply = await ask(gw, slack, "orders this week?")
            after = await scrape(gw)
    assert ready["model"] == {"state": "ok", "detail": ""}
    assert reply.startswith("Sorry, the analysis model is overloaded right now; I retried without success.")
    kind = {"kind": "overloaded"}
    assert metric(after, "ba_agent_model_errors_total", **kind) - metric(before, "ba_agent_model_errors_total", **kind) == 1


async def test_a_silent_endpoint_leaves_the_model_unverified_without_stopping_anything(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        config = AgentConfig(
            api_key="k", base_url=f"http://127.0.0.1:{silent.getsockname()[1]}", data_dir=tmp_path
        )
        result = await check_model(config, timeout_s=0.5)
    assert result.state == "unverified" and result.detail == "no answer within 0.5 s"


async def test_failed_tool_calls_and_turns_are_counted_in_metrics_and_stats(tmp_path: Path, slack: FakeSlack) -> None:
    async with FakeAnthropic() as anthropic:
        anthropic.script(
            Reply([tool_use("sql_query", {"sql": "SELECT nothing FROM no_such_table"}, id="toolu_bad")]),
            Reply([text("That table does not exist.")]),
        )
        settings = gateway_settings(f"sqlite:///{tmp_path / 'ba.db'}", tmp_path / "data", anthropic, slack)
        async with running_gateway(settings) as gw:
            before = await scrape(gw)
            reply = await ask(gw, slack, "orders?")
            after = await scrape(gw)
            stats = await call_stats(gw.runtime.sessions)
    assert reply == "That table does not exist."

    def delta(sample: str, **labels: str) -> float:
        return metric(after, sample, **labels) - metric(before, sample, **labels)

    assert delta("ba_agent_tool_calls_total", tool="sql_query", outcome="error") == 1
    assert sum(
        delta("ba_agent_tool_errors_total", tool="sql_query", error_type=kind)
        for kind in {s.labels["error_type"] for f in text_string_to_metric_families(after) for s in f.samples
                     if s.name == "ba_agent_tool_errors_total"}
    ) == 1
    assert delta("ba_agent_model_calls_total", outcome="ok") == 2
    assert delta("ba_agent_turn_duration_seconds_count", outcome="answered") == 1
    assert delta("ba_agent_http_requests_total", method="POST", route="/slack/events", status="200") == 1
    assert delta("ba_agent_ack_latency_seconds_count", platform="slack") == 1
    [tool] = [s for s in stats if s.kind == "tool"]
    assert (tool.name, tool.calls, tool.failures) == ("sql_query", 1, 1)
