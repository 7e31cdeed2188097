"""The Slack responder's delivery is idempotent: an answer resumed after a crash posts neither its
text nor its files twice (real slack_sdk client against the fake Slack Web API)."""

from __future__ import annotations

from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.responder import SlackResponder
from agent_core.messages import InboundMessage, OutboundFile, OutboundReply, ThreadKey
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
