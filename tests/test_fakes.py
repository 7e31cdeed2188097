"""The fakes in tests/fakes speak the real protocols: drive them through the real SDKs."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import anthropic
import pytest
from anthropic import Anthropic, AsyncAnthropic
from anthropic.types import MessageParam
from slack_bolt.async_app import AsyncApp, AsyncSay
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes import slack_events
from tests.fakes.anthropic_api import (
    FakeAnthropic,
    HttpError,
    Reply,
    StreamError,
    estimate_tokens,
    text,
    thinking,
    tool_use,
)
from tests.fakes.slack_api import FakeSlack

MODEL = "claude-fake-model"
USER_TURN: list[MessageParam] = [{"role": "user", "content": "why did GMV drop?"}]


def client_for(fake: FakeAnthropic) -> AsyncAnthropic:
    """A real SDK client aimed at ``fake``; use it with ``async with`` so its pool is closed."""
    return AsyncAnthropic(base_url=fake.base_url, api_key="test-key")


# --------------------------------------------------------------------------- Anthropic


async def test_stream_rebuilds_thinking_text_and_tool_use() -> None:
    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.script(
            Reply(
                [
                    thinking("GMV is orders times AOV; check both.", signature="sig-1"),
                    text("Let me query the orders table for the last two weeks."),
                    tool_use(
                        "run_sql",
                        {"sql": "select day, sum(gmv) from orders group by 1", "limit": 14},
                        id="toolu_1",
                    ),
                ]
            )
        )
        async with client.messages.stream(
            model=MODEL, max_tokens=1024, messages=USER_TURN
        ) as stream:
            deltas = [event.text async for event in stream if event.type == "text"]
            message = await stream.get_final_message()

    assert len(deltas) > 1  # really streamed in pieces
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[0].thinking == "GMV is orders times AOV; check both."
    assert message.content[0].signature == "sig-1"
    assert message.content[1].text == "Let me query the orders table for the last two weeks."
    assert message.content[2].input == {
        "sql": "select day, sum(gmv) from orders group by 1",
        "limit": 14,
    }
    assert (message.content[2].id, message.content[2].name) == ("toolu_1", "run_sql")
    assert message.stop_reason == "tool_use" and message.model == MODEL
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 1
    request = fake.last_request
    assert request.body["stream"] is True and request.body["messages"] == USER_TURN
    assert request.api_key == "test-key" and request.headers["anthropic-version"]


async def test_create_returns_json_message_with_usage_override() -> None:
    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.script(Reply([text("Refusing.")], stop_reason="refusal", usage={"output_tokens": 3}))
        message = await client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)

    assert message.content[0].text == "Refusing."
    assert message.stop_reason == "refusal" and message.usage.output_tokens == 3
    assert "stream" not in fake.last_request.body


async def test_sdk_retries_past_two_overloaded_errors() -> None:
    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.script(
            HttpError(retry_after=0.01),
            HttpError(retry_after=0.01),
            Reply([text("third time lucky")]),
        )
        message = await client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)

    assert message.content[0].text == "third time lucky"
    assert [r.headers["x-stainless-retry-count"] for r in fake.requests] == ["0", "1", "2"]


async def test_errors_carry_the_api_envelope_and_request_id() -> None:
    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.script(HttpError(429, "rate_limit_error", "Slow down", should_retry=False))
        with pytest.raises(anthropic.RateLimitError) as caught:
            await client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)
        # Nothing scripted: fail fast (no SDK retries) with a message saying why.
        with pytest.raises(anthropic.InternalServerError, match="no scripted response"):
            await client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)

    assert caught.value.type == "rate_limit_error" and caught.value.api_message == "Slow down"
    assert caught.value.request_id and caught.value.request_id.startswith("req_")
    assert len(fake.requests) == 2


async def test_stream_error_raises_mid_stream() -> None:
    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.script(StreamError([text("Partial answer")], error_type="overloaded_error"))
        received: list[str] = []
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with client.messages.stream(
                model=MODEL, max_tokens=64, messages=USER_TURN
            ) as stream:
                async for event in stream:
                    if event.type == "text":
                        received.append(event.text)

    assert "".join(received) == "Partial answer"
    assert caught.value.type == "overloaded_error"


async def test_respond_with_and_conversation_validation() -> None:
    async def echo(request: dict[str, Any]) -> Reply:
        return Reply([text(f"echo: {request['messages'][-1]['content']}")])

    async with FakeAnthropic() as fake, client_for(fake) as client:
        fake.respond_with(echo)
        message = await client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)
        assert message.content[0].text == "echo: why did GMV drop?"

        unanswered_tool_call = [
            *USER_TURN,
            {"role": "assistant", "content": [tool_use("run_sql", {}, id="toolu_9")]},
            {"role": "user", "content": "and?"},
        ]
        with pytest.raises(anthropic.BadRequestError, match="toolu_9"):
            await client.messages.create(model=MODEL, max_tokens=64, messages=unanswered_tool_call)


def cached_request(question: str, history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A request with a cached system prompt and a cache breakpoint on the last user turn."""
    return {
        "model": MODEL,
        "max_tokens": 64,
        "system": [
            {
                "type": "text",
                "text": "You are a BA agent. " * 200,
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "messages": [
            *(history or []),
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": question, "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
    }


async def test_prompt_caching_usage() -> None:
    now = [0.0]
    async with FakeAnthropic(clock=lambda: now[0]) as fake, client_for(fake) as client:
        fake.respond_with(lambda request: Reply([text("ok")]))

        first = await client.messages.create(**cached_request("why did GMV drop?"))
        second = await client.messages.create(**cached_request("and revenue?"))
        # The conversation grows; the lookback finds the prefix the first request wrote.
        history = [
            {"role": "user", "content": "why did GMV drop?"},
            {"role": "assistant", "content": "ok"},
        ]
        third = await client.messages.create(**cached_request("by region?", history))
        now[0] += 301  # past the 5 minute TTL
        expired = await client.messages.create(**cached_request("why did GMV drop?"))
        counted = await client.messages.count_tokens(
            model=MODEL,
            messages=cached_request("x")["messages"],
            system=cached_request("x")["system"],
        )

    total = estimate_tokens(cached_request("why did GMV drop?"))
    assert first.usage.cache_read_input_tokens == 0
    # The whole first request lies before its last breakpoint, so all of it is written.
    assert first.usage.cache_creation_input_tokens == total
    assert first.usage.cache_creation.ephemeral_5m_input_tokens == total
    assert second.usage.cache_read_input_tokens > 1000  # the system prompt
    assert second.usage.cache_creation_input_tokens < 20  # only the new question
    assert second.usage.input_tokens == 0
    assert third.usage.cache_read_input_tokens == total
    assert (
        expired.usage.cache_read_input_tokens == 0
        and expired.usage.cache_creation_input_tokens == total
    )
    assert counted.input_tokens == estimate_tokens(cached_request("x"))


async def test_min_cacheable_tokens_disables_small_prefixes() -> None:
    async with FakeAnthropic(min_cacheable_tokens=10_000) as fake, client_for(fake) as client:
        fake.respond_with(lambda request: Reply([text("ok")]))
        for _ in range(2):
            message = await client.messages.create(**cached_request("q"))
            assert (
                message.usage.cache_read_input_tokens
                == message.usage.cache_creation_input_tokens
                == 0
            )


def test_anthropic_in_thread_from_sync_code() -> None:
    with (
        FakeAnthropic.in_thread() as fake,
        Anthropic(base_url=fake.base_url, api_key="test-key") as client,
    ):
        fake.script(Reply([text("sync hello")]), Reply([text("streamed hello")]))
        created = client.messages.create(model=MODEL, max_tokens=64, messages=USER_TURN)
        with client.messages.stream(model=MODEL, max_tokens=64, messages=USER_TURN) as stream:
            streamed = stream.get_final_text()
        assert len(fake.wait_for_requests_sync(2)) == 2
        assert fake.queued == 0

    assert created.content[0].text == "sync hello" and streamed == "streamed hello"


# --------------------------------------------------------------------------- Slack Web API


def slack_client(fake: FakeSlack, token: str = "xoxb-test") -> AsyncWebClient:
    return AsyncWebClient(base_url=fake.base_url, token=token)


async def test_slack_post_update_replies_reactions_round_trip() -> None:
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as fake:
        client = slack_client(fake)
        auth = await client.auth_test()
        assert (auth["user_id"], auth["bot_id"], auth["team_id"]) == ("UBOT", "B1", "T1")

        question = fake.add_message("C1", "<@UBOT> why did GMV drop?", "U1")
        metadata = {"event_type": "ba_answer", "event_payload": {"run_id": "r1"}}
        first = await client.chat_postMessage(
            channel="C1", thread_ts=question["ts"], text="Thinking…", metadata=metadata
        )
        second = await client.chat_postMessage(
            channel="C1", thread_ts=question["ts"], markdown_text="**Done**"
        )
        assert float(second["ts"]) > float(first["ts"])
        await client.chat_update(channel="C1", ts=first["ts"], text="GMV fell 4% on fewer orders.")
        await client.reactions_add(channel="C1", timestamp=question["ts"], name="eyes")
        with pytest.raises(SlackApiError) as caught:
            await client.reactions_add(channel="C1", timestamp=question["ts"], name="eyes")
        assert caught.value.response["error"] == "already_reacted"
        await client.reactions_remove(channel="C1", timestamp=question["ts"], name="eyes")
        assert fake.reactions_on("C1", question["ts"]) == []

        replies = await client.conversations_replies(
            channel="C1", ts=question["ts"], include_all_metadata=True
        )
        texts = [m["text"] for m in replies["messages"]]
        assert texts == ["<@UBOT> why did GMV drop?", "GMV fell 4% on fewer orders.", "**Done**"]
        assert replies["messages"][0]["reply_count"] == 2
        assert replies["messages"][1]["metadata"] == metadata and "edited" in replies["messages"][1]
        page = await client.conversations_replies(channel="C1", ts=question["ts"], limit=2)
        rest = await client.conversations_replies(
            channel="C1", ts=question["ts"], cursor=page["response_metadata"]["next_cursor"]
        )
        assert "metadata" not in page["messages"][1] and page["has_more"]
        assert [m["text"] for m in rest["messages"]] == ["**Done**"]

        link = await client.chat_getPermalink(channel="C1", message_ts=second["ts"])
        assert link["permalink"].endswith(f"?thread_ts={question['ts']}&cid=C1")
        await client.chat_delete(channel="C1", ts=second["ts"])
        await client.assistant_threads_setStatus(
            channel_id="C1", thread_ts=question["ts"], status="is querying…"
        )

    assert [m["text"] for m in fake.posted(channel="C1", thread_ts=question["ts"])] == [
        "GMV fell 4% on fewer orders."
    ]
    assert fake.assistant_status[("C1", question["ts"])] == "is querying…"
    assert fake.calls_to("chat.postMessage")[0].headers["authorization"] == "Bearer xoxb-test"


async def test_slack_lookups() -> None:
    async with FakeSlack() as fake:
        fake.add_user("U1", "Ada Lovelace", tz="Europe/London")
        client = slack_client(fake)
        user = await client.users_info(user="U1")
        dm = await client.conversations_info(channel="D1")
        with pytest.raises(SlackApiError, match="user_not_found"):
            await client.users_info(user="U404")

    assert (user["user"]["real_name"], user["user"]["tz"]) == ("Ada Lovelace", "Europe/London")
    assert dm["channel"]["is_im"] is True


async def test_slack_files_upload_v2_round_trip() -> None:
    async with FakeSlack() as fake:
        client = slack_client(fake)
        upload = await client.files_upload_v2(
            channel="C1",
            thread_ts="1700000000.000001",
            content=b"day,gmv\n1,100\n",
            filename="gmv.csv",
            title="GMV by day",
            initial_comment="Here is the data",
        )
        file_id = upload["file"]["id"]
        info = await client.files_info(file=file_id)
        replies = await client.conversations_replies(channel="C1", ts="1700000000.000001")

    assert fake.uploads[0].content == b"day,gmv\n1,100\n"
    assert (fake.uploads[0].title, fake.uploads[0].channel_id, fake.uploads[0].initial_comment) == (
        "GMV by day",
        "C1",
        "Here is the data",
    )
    assert info["file"]["name"] == "gmv.csv" and info["file"]["mimetype"] == "text/csv"
    assert replies["messages"][0]["files"][0]["id"] == file_id


async def test_slack_auth_errors() -> None:
    async with FakeSlack(bot_token="xoxb-right") as fake:
        with pytest.raises(SlackApiError) as wrong:
            await slack_client(fake, token="xoxb-wrong").chat_postMessage(channel="C1", text="hi")
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{fake.base_url}auth.test") as response,
        ):
            missing = await response.json()

    assert (
        wrong.value.response.status_code == 200 and wrong.value.response["error"] == "invalid_auth"
    )
    assert missing == {"ok": False, "error": "not_authed"}
    assert fake.posted() == []


async def test_slack_rate_limit_retry_after_is_honoured() -> None:
    async with FakeSlack() as fake:
        client = slack_client(fake)
        client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
        # The handler sleeps Retry-After + up to 1s; 2s tells it apart from its 1-2s default.
        fake.fail_next("chat.postMessage", retry_after=2)
        started = time.monotonic()
        await client.chat_postMessage(channel="C1", text="after the limit")
        elapsed = time.monotonic() - started

        fake.fail_next("reactions.add", error="invalid_name", status=200)
        with pytest.raises(SlackApiError, match="invalid_name"):
            await client.reactions_add(channel="C1", timestamp="1.0", name="nope")

    assert elapsed >= 2
    assert len(fake.calls_to("chat.postMessage")) == 2 and len(fake.posted()) == 1


async def test_slack_private_file_download_needs_bot_token() -> None:
    async with FakeSlack() as fake:
        plain = fake.add_file("q3.csv", b"a,b\n", "text/csv")
        moved = fake.add_file("q4.csv", b"c,d\n", "text/csv", redirect=True)
        auth = {"Authorization": "Bearer xoxb-test"}
        async with aiohttp.ClientSession() as session:
            async with session.get(plain["url_private_download"], headers=auth) as response:
                assert (response.content_type, await response.read()) == ("text/csv", b"a,b\n")
            async with session.get(plain["url_private"]) as response:
                assert response.status == 200 and response.content_type == "text/html"
            async with session.get(moved["url_private"], headers=auth) as response:
                assert len(response.history) == 1 and response.history[0].status == 302
                assert await response.read() == b"c,d\n"

    assert fake.downloads == [plain["id"], moved["id"]]


async def test_slack_wait_for_sees_calls_made_concurrently() -> None:
    async with FakeSlack() as fake:
        task = asyncio.create_task(slack_client(fake).chat_postMessage(channel="C1", text="later"))
        calls = await fake.wait_for("chat.postMessage")
        await task
    assert calls[0].params["text"] == "later"


def test_slack_in_thread_from_sync_code() -> None:
    with FakeSlack.in_thread(bot_token="xoxb-sync") as fake:
        client = WebClient(base_url=fake.base_url, token="xoxb-sync")
        client.chat_postMessage(channel="C9", text="from sync code")
        assert fake.wait_for_sync("chat.postMessage")[0].params["channel"] == "C9"


# --------------------------------------------------------------------------- Slack events


def test_signed_events_verify_with_slack_sdk() -> None:
    payload = slack_events.message(
        "hi", user="U1", channel="D1", ts="1700000001.000100", channel_type="im"
    )
    body, headers = slack_events.signed_request(
        payload, "shh", retry_num=1, retry_reason="http_timeout"
    )
    verifier = SignatureVerifier("shh")

    assert verifier.is_valid_request(body, headers)
    assert not SignatureVerifier("other").is_valid_request(body, headers)
    assert headers["X-Slack-Retry-Num"] == "1" and headers["X-Slack-Retry-Reason"] == "http_timeout"
    assert payload["type"] == "event_callback" and payload["event_id"].startswith("Ev")
    assert slack_events.url_verification("abc")["challenge"] == "abc"
    shared = slack_events.message("see file", "U1", "D1", "1700000002.000100", files=[{"id": "F1"}])
    assert shared["event"]["subtype"] == "file_share"


async def test_bolt_app_handles_signed_mention_through_fake_slack() -> None:
    async with FakeSlack() as fake:
        app = AsyncApp(
            client=slack_client(fake), signing_secret="shh", process_before_response=True
        )

        @app.event("app_mention")
        async def answer(event: dict[str, Any], say: AsyncSay) -> None:
            await say(text="On it.", thread_ts=event["ts"])

        payload = slack_events.app_mention(
            "<@UBOT> why did GMV drop?", "U1", "C1", "1700000001.000100"
        )
        body, headers = slack_events.signed_request(payload, "shh")
        response = await app.async_dispatch(AsyncBoltRequest(body=body.decode(), headers=headers))

    assert response.status == 200
    assert fake.posted(channel="C1", thread_ts="1700000001.000100")[0]["text"] == "On it."
    assert payload["event"]["blocks"][0]["elements"][0]["elements"][0] == {
        "type": "user",
        "user_id": "UBOT",
    }
    assert json.loads(body) == payload
