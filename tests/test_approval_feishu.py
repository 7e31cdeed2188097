"""Approval in the thread, end to end on Feishu: the real gateway and lark-oapi client against the
fake Feishu and model APIs, a DuckDB warehouse whose access policy requires approval.

The query waits for an interactive card with Approve / Reject buttons posted in the topic; a
click comes back as a `card.action.trigger` callback — encrypted and signed on the webhook, or as
a long-connection frame — and resumes the paused turn exactly once. A non-approver gets a toast
and nothing changes; after the decision the card shows the outcome.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu, SentMessage
from tests.fakes.feishu_events import (
    USER_OPEN_ID,
    bot_mention,
    card_click,
    encrypted_body,
    signed_headers,
    text_event,
)
from tests.harness import Gateway, feishu_gateway_settings, running_gateway
from tests.waiting import eventually

POLICY = """\
groups:
  finance: [feishu:ou_fin]
sources:
  dwh:
    groups: [default]
    require_approval: true
    approvers: finance
"""
QUESTION_SQL = "SELECT region, SUM(amount) AS total FROM orders GROUP BY region ORDER BY region"
ASKER, FINANCE, STRANGER = USER_OPEN_ID, "ou_fin", "ou_other"
CHAT = "oc_group"


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
        "FEISHU_STREAMING_CARDS": False,  # each answer is one card message, read whole
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


def approval_message(feishu: FakeFeishu) -> SentMessage:
    [message] = [m for m in feishu.messages if _is_approval_card(m)]
    return message


def _is_approval_card(message: SentMessage) -> bool:
    return message.msg_type == "interactive" and "waits for approval" in json.dumps(message.content)


def answers(feishu: FakeFeishu) -> list[str]:
    """The text of every answer posted (everything but the approval card): a card's first
    Markdown element (a provenance footer follows it)."""
    shown = []
    for message in feishu.messages:
        if _is_approval_card(message):
            continue
        elements = message.content.get("body", {}).get("elements", [])
        shown.append(next(e["content"] for e in elements if e.get("tag") == "markdown"))
    return shown


def buttons(card: dict[str, Any]) -> list[str]:
    return [
        element["element_id"]
        for block in card["body"]["elements"]
        for column in block.get("columns", [])
        for element in column["elements"]
        if element.get("tag") == "button"
    ]


def click(feishu: FakeFeishu, button: str, user: str) -> dict[str, Any]:
    """The callback of ``user`` clicking ``button`` on the approval card as it was posted (a
    client that has not refreshed yet still shows the buttons)."""
    message = approval_message(feishu)
    return card_click(message.content, button, user, message_id=message.message_id, chat_id=CHAT)


async def post_callback(gw: Gateway, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body = encrypted_body(payload)
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        return resp.status, await resp.json()


QUESTION = text_event("@_user_1 East total?", mentions=[bot_mention()], chat_id=CHAT, message_id="om_question")


async def test_the_query_waits_for_the_card_then_answers_once(settings_extra: dict, tmp_path: Path) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.respond_with(analyst)
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu, **settings_extra)
            async with running_gateway(settings) as gw:
                status, _ = await post_callback(gw, QUESTION)
                assert status == 200
                await gw.settled(timeout=30)
                card = approval_message(feishu)
                assert answers(feishu) == []  # nothing ran yet
                assert card.reply_to == "om_question" and card.reply_in_thread
                assert buttons(card.content) == ["approve", "reject"]
                shown = json.dumps(card.content)
                assert "dwh" in shown and "orders" in shown and "SUM(amount)" in shown and "finance" in shown

                forged = click(feishu, "approve", ASKER)
                forged["header"]["token"] = "not-the-token"
                assert (await post_callback(gw, forged))[0] == 401  # verified like events

                assert await post_callback(gw, click(feishu, "approve", ASKER)) == (
                    200, {"toast": {"type": "success", "content": "Approved: the query runs now."}},
                )  # fmt: skip
                status, double = await post_callback(gw, click(feishu, "approve", ASKER))  # a double click
                assert status == 200 and double["toast"]["type"] == "warning"
                assert "already decided" in double["toast"]["content"]
                await gw.settled(timeout=30)
                await asyncio.sleep(0.3)  # a second resume, if there were one, would post by now
                assert answers(feishu) == ["East total is 301.5."]
                decided = approval_message(feishu).shown
                assert buttons(decided) == [] and decided["header"]["title"]["content"] == "Approved"
                assert f"Approved by <at id={ASKER}></at>" in json.dumps(decided, ensure_ascii=False)
                assert len(anthropic.requests) == 2  # asked once before the pause, once after


async def test_over_the_long_connection_a_stranger_gets_a_toast_and_a_rejection_is_reported(
    settings_extra: dict, tmp_path: Path
) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.respond_with(analyst)
            settings = feishu_gateway_settings(
                f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu,
                FEISHU_MODE="websocket", **settings_extra,
            )  # fmt: skip
            async with running_gateway(settings) as gw:
                await eventually(lambda: feishu.ws_open)
                feishu.ws_push_event(QUESTION)
                await eventually(lambda: any(_is_approval_card(m) for m in feishu.messages), timeout=30)

                frame = feishu.ws_push_event(click(feishu, "approve", STRANGER))
                await eventually(lambda: any(a["message_id"] == frame for a in feishu.ws_acks))
                toast = feishu.ws_callback_answer(frame)["toast"]
                assert toast["type"] == "warning" and "not yours to approve" in toast["content"]
                await gw.settled(timeout=30)
                assert answers(feishu) == [] and approval_message(feishu).updates == []

                frame = feishu.ws_push_event(click(feishu, "reject", FINANCE))  # the approvers' group
                await eventually(lambda: any(a["message_id"] == frame for a in feishu.ws_acks))
                assert feishu.ws_callback_answer(frame)["toast"]["type"] == "success"
                await eventually(lambda: len(answers(feishu)) == 1, timeout=30)
                await gw.settled(timeout=30)
                [answer] = answers(feishu)
                assert answer.startswith("No numbers") and f"rejected by {FINANCE}" in answer
                assert "301.5" not in answer
                decided = approval_message(feishu).shown
                assert buttons(decided) == [] and decided["header"]["title"]["content"] == "Rejected"

                frame = feishu.ws_push_event(click(feishu, "approve", ASKER))  # too late: decided
                await eventually(lambda: any(a["message_id"] == frame for a in feishu.ws_acks))
                assert "already decided" in feishu.ws_callback_answer(frame)["toast"]["content"]
                await gw.settled(timeout=30)
                assert len(answers(feishu)) == 1
