"""The Slack responder's delivery is idempotent: an answer resumed after a crash posts neither its
text nor its files twice, nor an approval request its message (real slack_sdk client against the
fake Slack Web API)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy.ext.asyncio import AsyncEngine

from adapters.slack.responder import SlackResponder
from agent_core.governance.approval_store import ApprovalStore
from agent_core.messages import InboundMessage, OutboundFile, OutboundReply, ThreadKey
from agent_core.state import ApprovalRequest
from agent_core.store.db import session_factory
from gateway.service.approval_flow import ApprovalFlow
from gateway.service.inbox import Inbox
from tests.fakes.slack_api import FakeSlack


def mention(ts: str) -> InboundMessage:
    key = ThreadKey(platform="slack", workspace="T1", channel="C1", root=ts)
    return InboundMessage(platform="slack", event_id="Ev1", message_id=ts, workspace="T1", channel="C1",
                          thread=key, reply_in_thread=ts, user="U1", text="chart GMV")


async def test_a_resumed_delivery_posts_text_and_files_once(tmp_path: Path) -> None:
    chart = tmp_path / "gmv-by-region-3f2a9c1b0d.png"
    chart.write_bytes(b"\x89PNG chart")
    reply = OutboundReply(text="GMV by region, chart attached.", files=[OutboundFile(path=str(chart), title="GMV by region")])
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_message("C1", "<@UBOT> chart GMV", "U1", ts="1700000001.000100")
        responder = SlackResponder(AsyncWebClient(base_url=slack.base_url, token="xoxb-test"))
        msg = mention("1700000001.000100")
        await responder.deliver(msg, reply, "d-1")
        await responder.deliver(msg, reply, "d-1", resumed=True)  # the crash came after posting
        await responder.close()
    assert [p["markdown_text"] for p in slack.posted(channel="C1") if "markdown_text" in p] == [reply.text]
    [upload] = slack.uploads
    assert upload.filename == chart.name and upload.title == "GMV by region" and upload.thread_ts == msg.reply_in_thread


async def test_an_approval_asked_again_after_a_crash_is_the_request_already_posted(engine: AsyncEngine) -> None:
    store = ApprovalStore(session_factory(engine))
    inbox = Inbox(engine)
    flow = ApprovalFlow(store, inbox, ttl=timedelta(hours=1))
    request = ApprovalRequest(tool_use_id="toolu_1", tool_name="sql_query", source="dwh", sql="SELECT 1",
                              reasons=["the source 'dwh' requires approval"])
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_message("C1", "<@UBOT> East total?", "U1", ts="1700000001.000100")
        responder = SlackResponder(AsyncWebClient(base_url=slack.base_url, token="xoxb-test"))
        msg = mention("1700000001.000100")
        # The crashed attempt opened the approval and posted it, and died before noting the post.
        opened, created = await store.open("thread-1", msg, request, timedelta(hours=1))
        first = await responder.ask_approval(msg, opened)
        await flow.ask("thread-1", msg, request, responder)  # the next attempt asks again
        await responder.close()
    await inbox.close()
    asked = [p for p in slack.posted(channel="C1") if "*Approval needed*" in json.dumps(p.get("blocks", []))]
    assert created and len(asked) == 1
    stored = await store.get(opened.id)
    assert stored is not None and stored.message_ref == first
