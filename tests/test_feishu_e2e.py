"""A Feishu user's view through the whole gateway: encrypted, signed webhook events in, replies
out through the real lark-oapi client to the fake Open API. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.service.app import RUNNER_OPTIONS, RUNTIME, create_app
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import (
    bot_mention,
    encrypted_body,
    file_event,
    signed_headers,
    text_event,
)
from tests.harness import Gateway, feishu_gateway_settings


@pytest.fixture
async def stack(database_url, tmp_path):
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(database_url, tmp_path, anthropic, feishu)
            server = TestServer(create_app(settings))
            await server.start_server(**RUNNER_OPTIONS)
            try:
                async with aiohttp.ClientSession() as http:
                    yield Gateway(server, http), feishu, anthropic
            finally:
                await server.close()


async def post(gw: Gateway, payload: dict[str, Any], **header_args: Any) -> int:
    body = encrypted_body(payload)
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body, **header_args)) as resp:
        await resp.read()
        return resp.status


def answer_texts(feishu: FakeFeishu) -> list[str]:
    """What the user sees: the final content of each card or message posted."""
    texts = []
    for message in feishu.messages:
        if message.msg_type == "interactive" and "data" in message.content:
            card = feishu.cards[message.content["data"]["card_id"]]
            texts.append(card.updates[-1]["body"]["elements"][0]["content"] if card.updates else "")
        else:
            texts.append(str(message.content))
    return texts


async def test_group_mention_gets_one_topic_reply_however_often_delivered(stack) -> None:
    gw, feishu, anthropic = stack
    anthropic.script(Reply([text("East China GMV fell 38% on Oct 20.")]))
    event = text_event("@_user_1 why did GMV drop?", mentions=[bot_mention()], event_id="ev-e2e-1")
    statuses = await asyncio.gather(post(gw, event), post(gw, event))
    statuses += [await post(gw, event), await post(gw, event)]
    assert statuses == [200] * 4
    await gw.settled()
    [reply] = feishu.messages
    assert reply.reply_in_thread and reply.reply_to == event["event"]["message"]["message_id"]
    assert "East China" in answer_texts(feishu)[0]
    assert len(anthropic.requests) == 1
    assert anthropic.last_request.body["messages"][0]["content"][0]["text"].endswith("why did GMV drop?")


async def test_group_chatter_without_mention_is_not_answered(stack) -> None:
    gw, feishu, anthropic = stack
    assert await post(gw, text_event("lunch anyone?")) == 200
    await asyncio.sleep(0.3)
    assert await gw.stored_events() == 0 and anthropic.requests == [] and feishu.messages == []


async def test_p2p_message_is_answered(stack) -> None:
    gw, feishu, anthropic = stack
    anthropic.script(Reply([text("Hello from the bot.")]))
    assert await post(gw, text_event("hi", chat_type="p2p", chat_id="oc_p2p")) == 200
    await gw.settled()
    assert len(feishu.messages) == 1 and "Hello from the bot." in answer_texts(feishu)[0]


@pytest.mark.parametrize("problem", ["stale_timestamp", "bad_signature"])
async def test_failed_verification_is_401_and_stores_nothing(stack, problem) -> None:
    gw, feishu, anthropic = stack
    event = text_event("@_user_1 hi", mentions=[bot_mention()])
    if problem == "stale_timestamp":
        status = await post(gw, event, timestamp=int(time.time()) - 3600)
    else:
        status = await post(gw, event, encrypt_key="another-key")
    assert status == 401
    await asyncio.sleep(0.2)
    assert await gw.stored_events() == 0 and anthropic.requests == []


async def test_readyz_reports_webhook_mode_ready(stack) -> None:
    gw, _, _ = stack
    status, body = await gw.get_json("/readyz")
    assert status == 200 and body["ok"] and body["connections"] == {}
    assert gw.server.app[RUNTIME].responders.keys() == {"feishu"}


async def test_a_mention_replying_to_a_file_reads_that_file(stack) -> None:
    """A file message cannot carry a mention: people quote it — "@bot what is the total gmv in
    this file?" — and the quoted file is fetched through the message-resource API and loaded."""
    gw, feishu, anthropic = stack
    anthropic.script(Reply([text("Total GMV is 300.")]))
    upload = file_event("file_v3_gmv", "gmv.csv", message_id="om_file_1")
    feishu.add_message("om_file_1", "file", {"file_key": "file_v3_gmv", "file_name": "gmv.csv"})
    feishu.add_resource("om_file_1", "file_v3_gmv", b"region,gmv\nEast,100\nWest,200\n", filename="gmv.csv")
    assert await post(gw, upload) == 200  # no mention in a group: not addressed to the bot
    question = text_event("@_user_1 what is the total gmv in this file?", mentions=[bot_mention()], parent_id="om_file_1")
    assert await post(gw, question) == 200
    await gw.settled()
    [request] = anthropic.requests
    first = request.body["messages"][0]["content"]
    notes = " ".join(block.get("text", "") for block in first)
    assert "gmv.csv: loaded as table `gmv`" in notes and "2 rows" in notes
    assert answer_texts(feishu)[-1] == "Total GMV is 300."


async def test_a_file_posted_in_a_topic_the_bot_is_in_needs_no_mention(stack) -> None:
    gw, feishu, anthropic = stack
    anthropic.script(Reply([text("Send me the numbers.")]), Reply([text("Got gmv.csv: total 300.")]))
    question = text_event("@_user_1 can you check our GMV file?", mentions=[bot_mention()], message_id="om_topic_root")
    assert await post(gw, question) == 200
    await gw.settled()
    feishu.add_resource("om_file_2", "file_v3_gmv2", b"region,gmv\nEast,100\nWest,200\n", filename="gmv.csv")
    upload = file_event("file_v3_gmv2", "gmv.csv", message_id="om_file_2", root_id="om_topic_root", thread_id="omt_1")
    elsewhere = file_event("file_v3_other", "other.csv", root_id="om_unrelated_root", thread_id="omt_2")
    assert await post(gw, upload) == 200 and await post(gw, elsewhere) == 200
    await gw.settled()
    assert len(anthropic.requests) == 2  # the file in a topic the bot is not part of is ignored
    notes = json.dumps(anthropic.requests[-1].body["messages"][-1]["content"])
    assert "gmv.csv: loaded as table `gmv`" in notes
