"""Slack's agent surface, end to end through slack-bolt and the fake Slack: suggested prompts
when a person opens the app's messages tab, a title and a status while answering, an agent
session that shows Slack's Stop while working — and answers go on in a workspace without them."""

from __future__ import annotations

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import assistant_thread_started, message
from tests.harness import gateway_settings, running_gateway

THREAD = "1699999999.000100"
SQL = "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY region ORDER BY gmv DESC LIMIT 1"


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


async def test_opening_the_messages_tab_suggests_questions_about_the_governed_metrics(database_url, tmp_path, fakes) -> None:
    anthropic, slack = fakes
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        assert (await gw.post_event(assistant_thread_started("U1", "D1", THREAD, context_channel="C1"))).status == 200
        await slack.wait_for("assistant.threads.setSuggestedPrompts")
    prompts = slack.suggested_prompts[("D1", THREAD)]
    assert 1 <= len(prompts) <= 4
    assert prompts[0]["message"] == "How did GMV change last week, and why?"  # the demo model's first metric
    assert not anthropic.requests  # suggesting costs no model call


async def test_the_operator_chooses_the_suggested_prompts(database_url, tmp_path, fakes) -> None:
    anthropic, slack = fakes
    chosen = "Weekly GMV by region|Why did refunds rise in October?"
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack, BA_SUGGESTED_PROMPTS=chosen)) as gw:
        await gw.post_event(assistant_thread_started("U1", "D1", THREAD))
        await slack.wait_for("assistant.threads.setSuggestedPrompts")
    assert [p["message"] for p in slack.suggested_prompts[("D1", THREAD)]] == chosen.split("|")


async def test_an_answer_in_the_messages_tab_has_a_title_a_status_and_an_agent_session(database_url, tmp_path, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([tool_use("sql_query", {"sql": SQL}, id="toolu_01")]), Reply([text("East China.")]))
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        await gw.post_event(message("Which region sells most?", "U1", "D1", ts="1699999999.000200", thread_ts=THREAD))
        await gw.settled()
    assert slack.assistant_titles[("D1", THREAD)] == "Which region sells most?"
    statuses = [c.params["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses[0] == "is working on it…" and "Querying the data…" in statuses
    assert statuses[-1] == ""  # cleared once answered
    session = slack.agent_sessions[("D1", THREAD)]
    assert session["statuses"] == ["processing", "active"] and session["title"] == "Which region sells most?"
    assert slack.markdown_of(slack.posted(channel="D1")[0]) == "East China."


async def test_a_workspace_without_the_agent_surface_still_gets_answers(database_url, tmp_path, fakes) -> None:
    anthropic, slack = fakes
    for method in ("assistant.threads.setTitle", "assistant.threads.setStatus", "agents.sessions.setStatus"):
        slack.fail_next(method, error="unknown_method", status=200)
    anthropic.script(Reply([text("First.")]), Reply([text("Second.")]))
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        await gw.post_event(message("one?", "U1", "D1", ts="1699999999.000200", thread_ts=THREAD))
        await gw.settled()
        await gw.post_event(message("two?", "U1", "D1", ts="1699999999.000300", thread_ts=THREAD))
        await gw.settled()
    assert [slack.markdown_of(p) for p in slack.posted(channel="D1")] == ["First.", "Second."]
    # Each refused method was tried once, then left alone.
    for method in ("assistant.threads.setTitle", "assistant.threads.setStatus", "agents.sessions.setStatus"):
        assert len(slack.calls_to(method)) == 1, method


def test_default_prompts_only_name_metrics_the_person_may_see(tmp_path) -> None:
    """Suggestions follow the access policy: a source closed to someone adds no prompt of theirs."""
    import json

    from agent_core.governance.audience import Identity
    from agent_core.i18n import Language
    from agent_core.suggestions import metric_prompts
    from gateway.config import load_settings
    from tests.test_semantic import build_duckdb, write_warehouse_yaml

    build_duckdb(tmp_path / "shop.duckdb")
    policy = tmp_path / "policy.yml"
    policy.write_text("groups:\n  finance: [slack:U02FIN]\nsources:\n  shop:\n    groups: [finance]\n")
    settings = load_settings(
        _env_file=None,
        BA_DATA_DIR=str(tmp_path),
        BA_DATASOURCES=json.dumps({"shop": f"duckdb://{tmp_path / 'shop.duckdb'}"}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "shop")),
        BA_ACCESS_POLICY=str(policy),
    )
    finance = metric_prompts(settings, Identity(platform="slack", user="U02FIN", channel="D1", is_dm=True), Language.EN)
    assert finance and finance[0] == "How did gmv change last week, and why?"
    assert metric_prompts(settings, Identity(platform="slack", user="U1", channel="D2", is_dm=True), Language.EN) == []
