"""Stop, end to end: Slack's native Stop on an agent session (`agent_session_stopped`) ends the
running turn through the inbox, keeps the partial answer marked stopped, and the conversation
goes on — also when the answering process is killed between the click and the cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import agent_session_stopped, app_mention, message
from tests.harness import SIGNING_SECRET, gateway_settings, running_gateway
from tests.serve_process import clean_env, free_port, post_event, start, stop, wait_healthy, wait_workers_ready
from tests.waiting import Deadline

THREAD = "1699999999.000100"
# Long and slow: the stop lands long before the model could finish it.
NEVER_FINISHED = "The first finding is that GMV fell in East China. " + "More detail follows here. " * 60
OPENING = NEVER_FINISHED[:40]


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


@pytest.fixture
async def gateway(database_url, tmp_path, fakes):
    anthropic, slack = fakes
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        yield gw


async def _wait_for_text(slack: FakeSlack, channel: str, fragment: str) -> None:
    deadline = Deadline(15)
    while not deadline.passed():
        if any(fragment in (m.get("markdown_text") or "") for m in slack.posted(channel=channel)):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{fragment!r} never showed in {channel}")


async def test_stop_mid_stream_keeps_the_partial_answer_and_the_conversation_goes_on(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text(NEVER_FINISHED)], event_delay=0.1), Reply([text("East China fell 38%.")]))
    await gateway.post_event(app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts=THREAD))
    await _wait_for_text(slack, "C1", OPENING)
    assert slack.agent_sessions[("C1", THREAD)]["status"] == "processing"  # Slack shows Stop

    stopped = slack.click_stop("C1", THREAD)
    response = await gateway.post_event(agent_session_stopped("C1", THREAD, "U2", streaming_message_ts=stopped))
    assert response.status == 200
    await gateway.settled()

    [answer] = slack.posted(channel="C1")
    shown = slack.markdown_of(answer)
    assert shown.startswith(OPENING) and NEVER_FINISHED.strip() not in shown
    assert shown.endswith("_Stopped by <@U2>._")
    assert any(b["type"] == "context_actions" for b in answer["blocks"])  # a stopped answer is rated too
    assert slack.agent_sessions[("C1", THREAD)]["status"] == "active"  # no longer "working"
    assert len(anthropic.requests) == 1

    # The next message continues the conversation, which holds the stopped answer.
    follow = message("go on, but shorter", "U1", "C1", ts="1699999999.000300", thread_ts=THREAD, channel_type="channel")
    await gateway.post_event(follow)
    await gateway.settled()
    follow_up = anthropic.requests[1].body["messages"]
    assert [m["role"] for m in follow_up] == ["user", "assistant", "user"]
    said = follow_up[1]["content"][0]["text"]
    assert said.startswith(OPENING) and said.endswith("_Stopped by <@U2>._")
    assert slack.markdown_of(slack.posted(channel="C1")[-1]) == "East China fell 38%."


async def test_a_stop_with_nothing_running_changes_nothing(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("East China fell 38%.")]))
    await gateway.post_event(app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts=THREAD))
    await gateway.settled()
    await gateway.post_event(agent_session_stopped("C1", THREAD, "U1"))
    await gateway.settled()
    [answer] = slack.posted(channel="C1")
    assert slack.markdown_of(answer) == "East China fell 38%."


def test_stop_accepted_while_the_answering_process_is_dead_is_honoured_once(database_url: str, tmp_path: Path) -> None:
    """kill -9 of the answering processes between the click and the cancel: the next worker
    finds the stop, does not continue the turn, and posts the partial answer marked stopped."""
    slack_fake = FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1")
    with FakeAnthropic.in_thread() as anthropic, slack_fake as slack:
        anthropic.script(Reply([text(NEVER_FINISHED)], event_delay=0.3))
        env = clean_env(
            tmp_path,
            DATABASE_URL=database_url,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_LEASE_SECONDS="3",
            BA_POLL_INTERVAL="0.2",
        )
        port = free_port()
        first = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> GMV?", "U1", "C1", ts=THREAD)) == 200
            slack.wait_for_sync("chat.appendStream", count=2, timeout=30)
        finally:
            first.kill()  # SIGKILL: serve and its worker die mid-stream, before any stop
            first.communicate()
        [cut] = slack.posted(channel="C1")
        shown = cut["markdown_text"]
        assert shown.startswith(OPENING)

        second = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            # The click reaches the new serve while the dead worker's lease still holds the thread.
            stopped = slack.click_stop("C1", THREAD)
            assert post_event(port, agent_session_stopped("C1", THREAD, "U2", streaming_message_ts=stopped)) == 200
            slack.wait_for_sync("chat.postMessage", count=1, timeout=30)
        finally:
            stop(second)
        [answer] = slack.posted(channel="C1")
        assert slack.markdown_of(answer) == f"{shown}\n\n_Stopped by <@U2>._"
        assert len(anthropic.requests) == 1  # the turn was not continued
