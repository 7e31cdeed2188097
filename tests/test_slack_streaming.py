"""Streamed answers on Slack, end to end: the real gateway, slack-bolt and slack_sdk against the
fake Slack API (which streams like Slack, or refuses to) and the fake model."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.slack.responder import REPLY_EVENT_TYPE
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import SIGNING_SECRET, gateway_settings, running_gateway
from tests.serve_process import clean_env, free_port, post_event, start, stop, wait_healthy, wait_workers_ready

# Before the fake's own timestamps, as a user's message is before the replies to it.
THREAD = "1699999999.000100"
LONG_ANSWER = (
    "GMV in **East China** fell 38% on Oct 20. Most of the drop came from new customers on "
    "mobile, where checkout errors tripled after the 19:00 release; returning customers were flat."
)
TOP_REGION_SQL = "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY region ORDER BY gmv DESC LIMIT 1"


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


@pytest.fixture
async def gateway(database_url, tmp_path, fakes):
    anthropic, slack = fakes
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        yield gw


def answer_meta(delivery_part: int = 0) -> dict:
    return {"event_type": REPLY_EVENT_TYPE, "part": delivery_part}


def reply_kind(post: dict) -> dict:
    meta = post.get("metadata") or {}
    return {"event_type": meta.get("event_type"), "part": (meta.get("event_payload") or {}).get("part")}


def answer_and_provenance(slack: FakeSlack, channel: str) -> dict:
    """The answer of a data question, checking that only its provenance line follows it."""
    answer, provenance = slack.posted(channel=channel)
    assert reply_kind(answer) == answer_meta(0) and reply_kind(provenance) == answer_meta(1)
    assert provenance["text"].startswith("Source:")
    return answer


async def test_answer_streams_into_the_thread_and_appears_once(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text(LONG_ANSWER)], event_delay=0.05))
    await gateway.post_event(app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts=THREAD))
    await gateway.settled()

    [start] = slack.calls_to("chat.startStream")
    assert start.params["thread_ts"] == THREAD
    # In a channel Slack needs to know whom the streamed text is for.
    assert (start.params["recipient_team_id"], start.params["recipient_user_id"]) == ("T1", "U1")
    assert slack.calls_to("chat.appendStream"), "the text arrived in pieces"
    assert len(slack.calls_to("chat.stopStream")) == 1
    assert slack.calls_to("chat.postMessage") == []
    [answer] = slack.posted(channel="C1")
    assert answer["thread_ts"] == THREAD and answer["markdown_text"] == LONG_ANSWER
    assert reply_kind(answer) == answer_meta()
    assert slack.streams.of("C1", answer["ts"]).stopped


async def test_tool_steps_show_as_progress_in_the_stream(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": TOP_REGION_SQL}, id="toolu_01")]),
        Reply([text("East China has the highest GMV.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> top region by GMV?", "U1", "C1", ts=THREAD))
    await gateway.settled()

    answer = answer_and_provenance(slack, "C1")
    stream = slack.streams.of("C1", answer["ts"])
    [step] = stream.tasks.values()
    assert step["title"] == "Querying the data…" and step["status"] == "complete"
    # The step showed before any answer text: the stream started with it.
    first_chunks = slack.calls_to("chat.startStream")[0].params["chunks"]
    assert [c["type"] for c in first_chunks] == ["task_update"]
    assert first_chunks[0]["status"] == "in_progress"
    assert answer["markdown_text"] == "East China has the highest GMV."


async def test_preamble_before_a_tool_is_replaced_by_the_answer(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply([text("Let me check."), tool_use("sql_query", {"sql": TOP_REGION_SQL}, id="toolu_01")]),
        Reply([text("East China has the highest GMV.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> top region by GMV?", "U1", "C1", ts=THREAD))
    await gateway.settled()

    answer = answer_and_provenance(slack, "C1")
    assert "Let me check." in slack.streams.of("C1", answer["ts"]).text  # shown while working
    assert answer["markdown_text"] == "East China has the highest GMV."


async def test_assistant_thread_gets_a_status_line_and_a_stream(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": TOP_REGION_SQL}, id="toolu_01")]),
        Reply([text("East China.")]),
    )
    event = message("top region?", "U1", "D1", ts="1699999999.000200", thread_ts=THREAD, channel_type="im")
    await gateway.post_event(event)
    await gateway.settled()

    statuses = [c.params["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert "Querying the data…" in statuses
    answer = answer_and_provenance(slack, "D1")
    assert answer["thread_ts"] == THREAD and answer["markdown_text"] == "East China."
    assert len(slack.calls_to("chat.stopStream")) == 1


async def test_refused_streaming_falls_back_to_post_and_update(gateway, fakes) -> None:
    anthropic, slack = fakes
    slack.streams.refuse("unknown_method")  # a workspace without streaming
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": TOP_REGION_SQL}, id="toolu_01")]),
        Reply([text(LONG_ANSWER)], event_delay=0.05),
        Reply([text("Second answer.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts=THREAD))
    await gateway.settled()

    answer = answer_and_provenance(slack, "C1")
    assert answer["markdown_text"] == LONG_ANSWER
    progress, _ = slack.calls_to("chat.postMessage")  # posted at the first step, edited after
    assert "Querying the data…" in progress.params["markdown_text"]
    assert len(slack.calls_to("chat.update")) >= 2

    await gateway.post_event(app_mention("<@UBOT> and now?", "U1", "C1", ts="1699999999.000300"))
    await gateway.settled()
    assert len(slack.calls_to("chat.startStream")) == 1  # the refusal is remembered
    assert slack.markdown_of(slack.posted(channel="C1")[-1]) == "Second answer."
    assert [slack.markdown_of(p) for p in slack.posted(channel="C1")].count(LONG_ANSWER) == 1


def test_stream_cut_by_kill_9_is_replaced_by_one_answer(database_url: str, tmp_path: Path) -> None:
    slack_fake = FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1")
    with FakeAnthropic.in_thread() as anthropic, slack_fake as slack:
        anthropic.script(
            Reply([text("This answer is cut off because the process dies " * 6)], event_delay=0.3),
            Reply([text("Answered after the restart.")]),
        )
        env = clean_env(
            tmp_path,
            DATABASE_URL=database_url,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_LEASE_SECONDS="2",
            BA_POLL_INTERVAL="0.2",
        )
        port = free_port()
        first = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> GMV?", "U1", "C1", ts=THREAD)) == 200
            slack.wait_for_sync("chat.appendStream", count=1, timeout=30)
        finally:
            first.kill()  # SIGKILL mid-stream: the stream is never stopped
            first.communicate()
        [cut] = slack.posted(channel="C1")
        assert "cut off" in cut["markdown_text"] and not slack.streams.of("C1", cut["ts"]).stopped

        second = start(env, port, tmp_path)
        try:
            slack.wait_for_sync("chat.stopStream", count=2, timeout=30)  # the cut one, then the answer
            slack.wait_for_sync("chat.delete", count=1, timeout=10)
        finally:
            stop(second)
        [answer] = slack.posted(channel="C1")
        assert answer["markdown_text"] == "Answered after the restart."
        assert answer["thread_ts"] == THREAD and reply_kind(answer) == answer_meta()
