"""A Slack user's view, end to end: signed Events API deliveries in, Web API calls out.

The gateway runs for real (aiohttp, slack-bolt, the anthropic SDK); Slack and the model are
local fakes speaking their wire protocols. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, HttpError, Reply, StreamError, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import gateway_settings, running_gateway


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


@pytest.fixture
async def gateway(database_url, tmp_path, fakes):
    anthropic, slack = fakes
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        yield gw


def replies(slack: FakeSlack, channel: str) -> list[dict]:
    return [m for m in slack.posted(channel=channel)]


async def test_channel_mention_is_answered_in_its_thread(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("GMV in **East China** fell 38% on Oct 20.")]))
    resp = await gateway.post_event(app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts="1700000001.000100"))
    assert resp.status == 200
    await gateway.settled()
    [reply] = replies(slack, "C1")
    assert reply["thread_ts"] == "1700000001.000100"
    assert "East China" in reply["markdown_text"]
    # The model got the question without the bot mention, and the tool list.
    request = anthropic.last_request.body
    assert request["messages"][0]["content"][0]["text"].endswith("why did GMV drop?")
    assert "<@UBOT>" not in json.dumps(request["messages"])
    assert "sql_query" in [t["name"] for t in request["tools"]]
    # Progress was shown at once and cleared afterwards.
    assert [c.params["name"] for c in slack.calls_to("reactions.add")] == ["eyes"]
    assert slack.reactions_on("C1", "1700000001.000100") == []


async def test_dm_is_answered_top_level_and_new_resets(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("Hello! Ask me about your metrics.")]), Reply([text("Fresh start.")]))
    await gateway.post_event(message("hi", "U1", "D1", ts="1700000001.000100", channel_type="im"))
    await gateway.settled()
    await gateway.post_event(message("new", "U1", "D1", ts="1700000002.000100", channel_type="im"))
    await gateway.settled()
    await gateway.post_event(message("hello again", "U1", "D1", ts="1700000003.000100", channel_type="im"))
    await gateway.settled()
    posts = replies(slack, "D1")
    assert [p.get("thread_ts") for p in posts] == [None, None, None]
    assert "fresh conversation" in posts[1]["markdown_text"]
    # After "new" the model sees only the new conversation.
    assert len(anthropic.last_request.body["messages"]) == 1


async def test_same_event_four_times_gets_one_answer(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("One answer.")]), Reply([text("Second answer (must not happen).")]))
    event = app_mention("<@UBOT> total orders?", "U1", "C1", ts="1700000001.000100", event_id="EvDUP1")
    first = await asyncio.gather(gateway.post_event(event), gateway.post_event(event, retry_num=1, retry_reason="http_timeout"))
    later = [await gateway.post_event(event, retry_num=n, retry_reason="http_timeout") for n in (2, 3)]
    # Slack also sends the mention as a `message` event with its own event id.
    twin = message("<@UBOT> total orders?", "U1", "C1", ts="1700000001.000100", channel_type="channel")
    later.append(await gateway.post_event(twin))
    assert all(r.status == 200 for r in [*first, *later])
    await gateway.settled()
    assert len(replies(slack, "C1")) == 1
    assert len(anthropic.requests) == 1


@pytest.mark.parametrize("problem", ["bad_signature", "stale_timestamp"])
async def test_unverified_requests_get_401_and_change_nothing(gateway, fakes, problem) -> None:
    anthropic, slack = fakes
    event = app_mention("<@UBOT> hi", "U1", "C1", ts="1700000001.000100")
    if problem == "bad_signature":
        resp = await gateway.post_event(event, secret="wrong-secret")
    else:
        resp = await gateway.post_event(event, timestamp=int(time.time()) - 10 * 60)
    assert resp.status == 401
    await asyncio.sleep(0.3)
    assert await gateway.stored_events() == 0
    assert anthropic.requests == []
    assert slack.posted() == []


async def test_follow_up_in_thread_sees_the_first_exchange(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("GMV was 1.2M.")]), Reply([text("That is 5% above last week.")]))
    await gateway.post_event(app_mention("<@UBOT> GMV yesterday?", "U1", "C1", ts="1700000001.000100"))
    await gateway.settled()
    # A follow-up in the thread, without a mention.
    await gateway.post_event(
        message("and vs last week?", "U1", "C1", ts="1700000005.000100", channel_type="channel", thread_ts="1700000001.000100")
    )
    await gateway.settled()
    assert len(replies(slack, "C1")) == 2
    messages = anthropic.last_request.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][0]["text"] == "GMV was 1.2M."
    assert "and vs last week?" in messages[2]["content"][0]["text"]


@pytest.mark.parametrize("answer", [(503, "service_unavailable"), (200, "fatal_error")])
async def test_a_mention_while_slack_cannot_say_who_the_bot_is_is_stored_and_answered(
    database_url, tmp_path, fakes, answer
) -> None:
    """Slack's auth.test fails (an outage, or an error answer) from start-up on: a mention that
    arrives meanwhile — as a `message` event only, so that the bot's user id decides it is one —
    is acknowledged, stored and answered once, without the mention in the question."""
    anthropic, slack = fakes
    status, error = answer
    slack.fail_next("auth.test", error=error, status=status, retry_after=None, times=1000)
    anthropic.script(Reply([text("Orders are up 4%.")]))
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
        while (await gw.get_json("/readyz"))[1]["credentials"]["slack"]["state"] == "checking":
            await asyncio.sleep(0.05)
        ts = "1700000001.000100"
        resp = await gw.post_event(message("<@UBOT> orders this week?", "U1", "C1", ts=ts, channel_type="channel"))
        assert resp.status == 200 and await gw.stored_events() == 1
        await gw.settled()
    [reply] = [p for p in replies(slack, "C1") if "markdown_text" in p]
    assert reply["thread_ts"] == ts and reply["markdown_text"] == "Orders are up 4%."
    assert anthropic.requests[0].body["messages"][0]["content"][0]["text"].endswith("orders this week?")
    assert "<@UBOT>" not in json.dumps(anthropic.requests[0].body["messages"])


@pytest.mark.parametrize("arrives", ["message only", "file_share only", "message then app_mention", "app_mention then message"])
async def test_a_mention_is_answered_once_whichever_events_arrive(gateway, fakes, arrives) -> None:
    """Slack sometimes delivers a mention only as a `message` (or `file_share`) event, without
    `app_mention`, and sometimes both: the message is answered exactly once either way."""
    anthropic, slack = fakes
    anthropic.script(Reply([text("Answered.")]), Reply([text("Answered twice!")]))
    ts, question = "1700000001.000100", "<@UBOT> orders by region?"
    files = [slack.add_file("orders.csv", b"region,orders\nEast,3\n", "text/csv")] if "file_share" in arrives else None
    as_message = message(question, "U1", "C1", ts=ts, channel_type="channel", files=files)
    as_mention = app_mention(question, "U1", "C1", ts=ts)
    events = {"message only": [as_message], "file_share only": [as_message],
              "message then app_mention": [as_message, as_mention],
              "app_mention then message": [as_mention, as_message]}[arrives]  # fmt: skip
    for event in events:
        assert (await gateway.post_event(event)).status == 200
    await gateway.settled()
    answers = [p for p in replies(slack, "C1") if "markdown_text" in p]
    assert [p["markdown_text"] for p in answers] == ["Answered."]
    assert answers[0]["thread_ts"] == ts and len(anthropic.requests) == 1


async def test_channel_chatter_is_ignored(gateway, fakes) -> None:
    anthropic, slack = fakes
    top_level = message("lunch?", "U1", "C1", ts="1700000001.000100", channel_type="channel")
    unknown_thread = message(
        "re: lunch", "U2", "C1", ts="1700000002.000100", channel_type="channel", thread_ts="1700000001.000100"
    )
    from_bot = message("beep", "U9", "C1", ts="1700000003.000100", channel_type="im", bot_id="B9")
    for event in (top_level, unknown_thread, from_bot):
        assert (await gateway.post_event(event)).status == 200
    await asyncio.sleep(0.3)
    assert await gateway.stored_events() == 0
    assert anthropic.requests == []


async def test_tool_round_trip(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply(
            [
                text("Let me check."),
                tool_use(
                    "sql_query",
                    {"sql": "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY region ORDER BY gmv DESC LIMIT 1"},
                    id="toolu_01",
                ),
            ]
        ),
        Reply([text("East China has the highest GMV.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> top region by GMV?", "U1", "C1", ts="1700000001.000100"))
    await gateway.settled()
    second = anthropic.requests[1].body["messages"]
    result = second[-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01"
    assert not result.get("is_error") and "East China" in result["content"]
    assert replies(slack, "C1")[0]["markdown_text"] == "East China has the highest GMV."


async def test_write_sql_is_refused_to_the_model(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": "DELETE FROM demo.sales"}, id="toolu_w")]),
        Reply([text("I can only read data.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> delete everything", "U1", "C1", ts="1700000001.000100"))
    await gateway.settled()
    result = anthropic.requests[1].body["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_w" and result["is_error"] is True
    assert "permission_denied" in result["content"]
    assert replies(slack, "C1")[0]["markdown_text"] == "I can only read data."


async def test_overloaded_model_still_answers(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        HttpError(529, retry_after=0.01),
        HttpError(529, retry_after=0.01),
        StreamError([text("Partial")]),
        Reply([text("Answer after the storm.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> status?", "U1", "C1", ts="1700000001.000100"))
    await gateway.settled(timeout=30)
    assert [slack.markdown_of(p) for p in replies(slack, "C1")] == ["Answer after the storm."]


async def test_unavailable_model_gets_an_apology_and_history_stays_valid(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(*[HttpError(529, retry_after=0.01)] * 3, Reply([text("Back again.")]))
    await gateway.post_event(app_mention("<@UBOT> status?", "U1", "C1", ts="1700000001.000100"))
    await gateway.settled(timeout=30)
    [apology] = replies(slack, "C1")
    assert "reference" in apology["markdown_text"]
    await gateway.post_event(
        message("<@UBOT> again?", "U1", "C1", ts="1700000009.000100", channel_type="channel", thread_ts="1700000001.000100")
    )
    await gateway.post_event(app_mention("<@UBOT> again?", "U1", "C1", ts="1700000009.000100", thread_ts="1700000001.000100"))
    await gateway.settled(timeout=30)
    assert replies(slack, "C1")[-1]["markdown_text"] == "Back again."
    roles = [m["role"] for m in anthropic.last_request.body["messages"]]
    assert roles == ["user", "assistant", "user"]
