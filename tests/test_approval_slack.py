"""Approval in the thread, end to end on Slack: the real slack-bolt app and gateway against the
fake Slack and model APIs, a DuckDB warehouse whose access policy requires approval.

The question's query waits for Approve / Reject buttons posted in the thread; the decision
(a signed `block_actions` payload on /slack/events) resumes the paused turn exactly once, as
the asker, on whatever process holds the database.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from adapters.slack.render import APPROVE_ACTION, REJECT_ACTION
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, block_actions, signed_interaction
from tests.harness import SIGNING_SECRET, Gateway, gateway_settings, running_gateway
from tests.waiting import eventually

POLICY = """\
groups:
  finance: [slack:U02FIN]
sources:
  dwh:
    groups: [default]
    require_approval: true
    approvers: finance
"""
QUESTION_SQL = "SELECT region, SUM(amount) AS total FROM orders GROUP BY region ORDER BY region"
CHANNEL, ASKER, FINANCE, STRANGER = "C1", "U01ASK", "U02FIN", "U09OTHER"


@pytest.fixture
def settings_extra(tmp_path: Path) -> dict[str, Any]:
    warehouse = tmp_path / "dwh.duckdb"
    with duckdb.connect(str(warehouse)) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, amount DOUBLE)")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(1, "East", 301.5), (2, "West", 80.5)])
    policy = tmp_path / "access.yaml"
    policy.write_text(POLICY)
    return {
        "BA_DATASOURCES": json.dumps({"dwh": {"url": f"duckdb:///{warehouse}"}}),
        "BA_ACCESS_POLICY": str(policy),
    }


def analyst(request: dict) -> Reply:
    """Plays the model: queries `dwh`, then answers with what the tool returned."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": QUESTION_SQL}, id="toolu_dwh")])
    content = results[0]["content"]
    body = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    if results[0].get("is_error"):
        return Reply([text(f"No numbers: {body[:400]}")])
    return Reply([text("East total is 301.5." if "301.5" in body else f"Unexpected: {body[:300]}")])


def answers(slack: FakeSlack) -> list[str]:
    return [p["markdown_text"] for p in slack.posted(channel=CHANNEL) if "markdown_text" in p]


def approval_post(slack: FakeSlack) -> dict[str, Any]:
    [post] = [p for p in slack.posted(channel=CHANNEL) if "*Approval needed*" in json.dumps(p.get("blocks", []))]
    return post


async def click(gw: Gateway, slack: FakeSlack, action_id: str, user: str, *, on: dict | None = None) -> int:
    """``user`` clicks ``action_id`` on the approval post (``on``: as an earlier copy showed it)."""
    body, headers = signed_interaction(block_actions(on or approval_post(slack), action_id, user), SIGNING_SECRET)
    async with gw.http.post(gw.server.make_url("/slack/events"), data=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def ask(gw: Gateway) -> None:
    await gw.post_event(app_mention("<@UBOT> East total?", ASKER, CHANNEL, ts="1700000100.000100"))
    await gw.settled(timeout=30)


def buttons(post: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]]


async def test_the_query_waits_for_approve_then_answers_once(settings_extra: dict, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **settings_extra)
        async with running_gateway(settings) as gw:
            await ask(gw)
            post = approval_post(slack)
            assert answers(slack) == []  # nothing ran yet
            assert buttons(post) == [APPROVE_ACTION, REJECT_ACTION]
            assert post["thread_ts"] == "1700000100.000100"
            shown = json.dumps(post["blocks"])
            assert "dwh" in shown and "orders" in shown and "SUM(amount)" in shown and "finance" in shown
            assert await click(gw, slack, APPROVE_ACTION, ASKER) == 200
            assert await click(gw, slack, APPROVE_ACTION, ASKER) == 200  # a double click
            await gw.settled(timeout=30)
            await asyncio.sleep(0.3)  # a second resume, if there were one, would post by now
            assert answers(slack) == ["East total is 301.5."]
            decided = approval_post(slack)
            assert buttons(decided) == [] and f"Approved by <@{ASKER}>" in json.dumps(decided["blocks"])
            assert len(anthropic.requests) == 2  # asked once before the pause, once after


async def test_a_stranger_changes_nothing_and_a_rejection_is_reported(settings_extra: dict, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **settings_extra)
        async with running_gateway(settings) as gw:
            await ask(gw)
            assert await click(gw, slack, APPROVE_ACTION, STRANGER) == 200
            await gw.settled(timeout=30)
            assert answers(slack) == [] and buttons(approval_post(slack)) == [APPROVE_ACTION, REJECT_ACTION]
            [note] = slack.ephemerals
            assert note["user"] == STRANGER and "not yours to approve" in note["text"]
            assert await click(gw, slack, REJECT_ACTION, FINANCE) == 200  # the approvers' group
            await gw.settled(timeout=30)
            [answer] = answers(slack)
            assert answer.startswith("No numbers") and f"rejected by {FINANCE}" in answer
            assert "301.5" not in answer


async def test_a_restart_between_request_and_click_loses_nothing(settings_extra: dict, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'gw.db'}"
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(database, tmp_path, anthropic, slack, **settings_extra)
        async with running_gateway(settings) as gw:
            await ask(gw)
        async with running_gateway(settings) as restarted:  # a new app and runtime, same database
            assert await click(restarted, slack, APPROVE_ACTION, FINANCE) == 200
            await restarted.settled(timeout=30)
            assert answers(slack) == ["East total is 301.5."]


async def test_an_expired_approval_gives_the_model_the_expiry(settings_extra: dict, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack,
            BA_APPROVAL_TTL_MINUTES=0.02, **settings_extra,
        )  # fmt: skip
        async with running_gateway(settings) as gw:
            await ask(gw)
            stale_screen = copy.deepcopy(approval_post(slack))  # what the client still shows
            # Expires after 1.2 s; the sweep runs every second.
            await eventually(lambda: bool(answers(slack)), 10, "the expiry notice")
            await gw.settled(timeout=30)
            [answer] = answers(slack)
            assert answer.startswith("No numbers") and "expired" in answer
            assert await click(gw, slack, APPROVE_ACTION, ASKER, on=stale_screen) == 200  # too late
            await gw.settled(timeout=30)
            assert len(answers(slack)) == 1
            assert "already decided" in slack.ephemerals[-1]["text"]


async def test_a_newer_message_withdraws_the_request_and_a_later_click_runs_nothing(
    settings_extra: dict, tmp_path: Path
) -> None:
    def model(request: dict) -> Reply:
        last = request["messages"][-1]["content"]
        said = " ".join(b.get("text", "") for b in last if isinstance(b, dict)) if isinstance(last, list) else last
        return Reply([text("Fine, no query then.")]) if "never mind" in said else analyst(request)

    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(model)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **settings_extra)
        async with running_gateway(settings) as gw:
            await ask(gw)
            waiting = copy.deepcopy(approval_post(slack))
            follow_up = app_mention(
                "<@UBOT> never mind", ASKER, CHANNEL, ts="1700000101.000100", thread_ts="1700000100.000100"
            )
            await gw.post_event(follow_up)
            await gw.settled(timeout=30)
            withdrawn = approval_post(slack)
            assert buttons(withdrawn) == [] and "Withdrawn" in json.dumps(withdrawn["blocks"])
            # A click on the buttons as they were shown before runs nothing.
            assert await click(gw, slack, APPROVE_ACTION, ASKER, on=waiting) == 200
            await gw.settled(timeout=30)
            await asyncio.sleep(0.3)
            assert answers(slack) == ["Fine, no query then."]
