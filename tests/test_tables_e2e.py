"""Tables and long answers as users see them, through the whole gateway (slack-bolt, lark-oapi,
the anthropic SDK) against the local fakes: native table blocks and card tables, never raw
pipes; a table too big for a message with its full CSV in the thread, once; clean splits."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.responder import SlackResponder
from agent_core.messages import InboundMessage, OutboundReply, ThreadKey
from gateway.service.app import RUNNER_OPTIONS, create_app
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import bot_mention, encrypted_body, signed_headers, text_event
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import Gateway, feishu_gateway_settings, gateway_settings, running_gateway

THREAD = "1700000001.000100"
REGIONS = "| Region | GMV |\n|---|---:|\n| East China | 1,204,000 |\n| North China | 880,500 |"
ORDERS = "| Day | Orders |\n|---|---:|\n" + "\n".join(
    f"| 2026-{1 + i // 28:02d}-{1 + i % 28:02d} | {100 + i} |" for i in range(150)
)


@pytest.fixture
async def slack_stack(tmp_path: Path):
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack)
        async with running_gateway(settings) as gw:
            yield gw, anthropic, slack


@pytest.fixture
async def feishu_stack(tmp_path: Path):
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu)
            server = TestServer(create_app(settings))
            await server.start_server(**RUNNER_OPTIONS)
            try:
                async with aiohttp.ClientSession() as http:
                    yield Gateway(server, http), anthropic, feishu
            finally:
                await server.close()


def thread_of(slack: FakeSlack) -> list[dict[str, Any]]:
    return [m for m in slack.posted(channel="C1", thread_ts=THREAD) if not m.get("upload")]


def cells(block: dict[str, Any]) -> list[list[str]]:
    return [[cell["text"] for cell in row] for row in block["rows"]]


async def test_a_tabular_answer_arrives_as_a_slack_table_block(slack_stack) -> None:
    gw, anthropic, slack = slack_stack
    anthropic.script(Reply([text(f"GMV by region:\n\n{REGIONS}\n\nEast China leads.")]))
    await gw.post_event(app_mention("<@UBOT> GMV by region?", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=30)

    table_message, closing = thread_of(slack)
    assert "markdown_text" not in table_message and "|" not in table_message["text"]
    lead, table = table_message["blocks"]
    assert lead == {"type": "markdown", "text": "GMV by region:"}
    assert table["type"] == "table"
    assert cells(table) == [["Region", "GMV"], ["East China", "1,204,000"], ["North China", "880,500"]]
    assert slack.markdown_of(closing) == "East China leads."
    assert closing["blocks"][-1]["type"] == "context_actions"  # 👍/👎 close the answer
    assert slack.uploads == []  # the whole table is in the message: no CSV


async def test_a_150_row_table_shows_100_rows_and_attaches_the_full_csv_once(slack_stack) -> None:
    gw, anthropic, slack = slack_stack
    anthropic.script(Reply([text(f"Daily orders:\n\n{ORDERS}")]))
    # The first attempt fails at the CSV upload: the resumed delivery must not repeat the table.
    slack.fail_next("files.getUploadURLExternal", error="internal_error", status=200, retry_after=None)
    await gw.post_event(app_mention("<@UBOT> daily orders?", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=60)

    assert len(slack.calls_to("files.getUploadURLExternal")) == 2  # failed once, then resumed
    [message] = thread_of(slack)
    lead, table, feedback = message["blocks"]  # the answer's one message ends with 👍/👎
    assert feedback["type"] == "context_actions"
    rows = cells(table)
    assert len(rows) == 100 and rows[0] == ["Day", "Orders"] and rows[-1][1] == "198"  # the first 99
    [upload] = slack.uploads
    assert upload.thread_ts == THREAD and upload.filename.endswith(".csv")
    assert "Showing the first 99 of 150 rows" in lead["text"] and upload.filename in lead["text"]
    full = list(csv.reader(io.StringIO(upload.content.decode())))
    assert len(full) == 151 and full[-1] == ["2026-06-10", "249"]


async def test_a_long_answer_splits_outside_its_code_block(slack_stack) -> None:
    gw, anthropic, slack = slack_stack
    prose = "Revenue moved for many reasons, and each of them deserves a sentence. " * 30
    code = "```sql\n" + "\n".join(f"SELECT region, SUM(gmv) FROM sales_{i} GROUP BY region;" for i in range(40)) + "\n```"
    anthropic.script(Reply([text("\n\n".join([prose, code, prose, prose]))]))
    await gw.post_event(app_mention("<@UBOT> explain", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=30)

    parts = [slack.markdown_of(m) for m in thread_of(slack)]
    assert len(parts) > 1 and all(len(p) <= 3900 for p in parts)
    assert sum(code in p for p in parts) == 1  # the code block whole, in one message
    assert all(p.count("```") % 2 == 0 for p in parts)


async def test_a_resumed_delivery_posts_the_table_and_its_csv_once(tmp_path: Path) -> None:
    key = ThreadKey(platform="slack", workspace="T1", channel="C1", root=THREAD)
    msg = InboundMessage(platform="slack", event_id="Ev1", message_id=THREAD, workspace="T1", channel="C1",
                         thread=key, reply_in_thread=THREAD, user="U1", text="orders")
    reply = OutboundReply(text=f"Daily orders:\n\n{ORDERS}\n\nAll days had orders.")
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_message("C1", "<@UBOT> orders", "U1", ts=THREAD)
        responder = SlackResponder(AsyncWebClient(base_url=slack.base_url, token="xoxb-test"))
        await responder.deliver(msg, reply, "d-1")
        await responder.deliver(msg, reply, "d-1", resumed=True)  # the crash came after posting
        await responder.close()
        assert len(thread_of(slack)) == 2 and len(slack.uploads) == 1


# --- Feishu ------------------------------------------------------------------------------------


def final_cards(feishu: FakeFeishu) -> list[dict[str, Any]]:
    """The cards the user sees, in order: a streamed card as last written, others as sent."""
    cards = []
    for message in feishu.messages:
        if message.msg_type != "interactive":
            continue
        if "data" in message.content:
            card = feishu.cards[message.content["data"]["card_id"]]
            cards.append(card.updates[-1] if card.updates else card.card)
        else:
            cards.append(message.content)
    return cards


async def test_two_tables_on_feishu_arrive_as_two_cards_with_one_table_each(feishu_stack) -> None:
    gw, anthropic, feishu = feishu_stack
    channels = "| Channel | Orders |\n|---|---:|\n| App | 1,200 |\n| Web | 700 |"
    anthropic.script(Reply([text(f"By region:\n\n{REGIONS}\n\nBy channel:\n\n{channels}")]))
    body = encrypted_body(text_event("@_user_1 GMV by region and channel?", mentions=[bot_mention()]))
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        assert resp.status == 200
    await gw.settled(timeout=30)

    first, second = final_cards(feishu)
    tables = [[e for e in card["body"]["elements"] if e["tag"] == "table"] for card in (first, second)]
    assert [len(t) for t in tables] == [1, 1]
    assert [c["display_name"] for c in tables[0][0]["columns"]] == ["Region", "GMV"]
    assert [row["c0"] for row in tables[1][0]["rows"]] == ["App", "Web"]
    shown = json.dumps([first, second], ensure_ascii=False)
    assert "|---|" not in shown and "| App |" not in shown  # no raw pipes anywhere
