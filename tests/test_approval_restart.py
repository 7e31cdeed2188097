"""A pending approval survives kill -9: `ba-agent serve` is SIGKILLed right after it posted the
approval request; a new process on the same database takes the Approve click and answers the
question exactly once."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import duckdb

from adapters.slack.render import APPROVE_ACTION
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, block_actions, signed_interaction
from tests.harness import SIGNING_SECRET
from tests.serve_process import clean_env, free_port, post_event, start, stop, wait_healthy, wait_workers_ready
from tests.test_approval_slack import ASKER, CHANNEL, POLICY, analyst, approval_post
from tests.waiting import Deadline, scaled

QUESTION_TS = "1700000400.000100"


def click(port: int, post: dict, user: str) -> int:
    body, headers = signed_interaction(block_actions(post, APPROVE_ACTION, user), SIGNING_SECRET)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=scaled(10)) as resp:
        return resp.status


def answers(slack: FakeSlack) -> list[str]:
    posts = slack.posted(channel=CHANNEL, thread_ts=QUESTION_TS)
    shown = [p.get("markdown_text") or p.get("text") or "" for p in posts]
    return [t for t in shown if t.startswith(("East total", "No numbers", "Unexpected"))]


def test_a_click_after_kill_9_is_handled_by_the_next_process_once(database_url: str, tmp_path: Path) -> None:
    warehouse = tmp_path / "dwh.duckdb"
    with duckdb.connect(str(warehouse)) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, amount DOUBLE)")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(1, "East", 301.5), (2, "West", 80.5)])
    policy = tmp_path / "access.yaml"
    policy.write_text(POLICY)
    slack_fake = FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1")
    with FakeAnthropic.in_thread() as anthropic, slack_fake as slack:
        anthropic.respond_with(analyst)
        env = clean_env(
            tmp_path,
            DATABASE_URL=database_url,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_DATASOURCES=json.dumps({"dwh": {"url": f"duckdb:///{warehouse}"}}),
            BA_ACCESS_POLICY=str(policy),
            BA_LEASE_SECONDS="2",
            BA_POLL_INTERVAL="0.2",
        )
        port = free_port()
        first = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> East total?", ASKER, CHANNEL, ts=QUESTION_TS)) == 200
            slack.wait_for_sync("chat.postMessage", count=1, timeout=30)  # the approval request
        finally:
            first.kill()  # SIGKILL: no cleanup, whatever it held is left behind
            first.communicate()
        request = approval_post(slack)
        assert answers(slack) == []

        second = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            assert click(port, request, ASKER) == 200
            deadline = Deadline(30)
            while not answers(slack) and not deadline.passed():
                time.sleep(0.1)
            time.sleep(1.0)  # anything duplicated would show up by now
        finally:
            stop(second)
        assert answers(slack) == ["East total is 301.5."]
        approval_post(slack)  # still one request: the restart did not post it again
