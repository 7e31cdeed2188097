"""Stop and feedback on Feishu, end to end: the streaming card's Stop button ends the running
turn through the inbox (partial answer kept, marked stopped), and every answer card carries
👍/👎 whose clicks are stored per answer and person; a 👎 asks "what was wrong?" in a form; a 👍
on an answer from SQL on a data source sends its data owner a review card, and `search_schema`
returns the example once the owner approved it there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.service.feedback import FeedbackStore
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import (
    bot_mention,
    card_action,
    card_click,
    encrypted_body,
    form_submit,
    signed_headers,
    text_event,
)
from tests.harness import Gateway, feishu_gateway_settings, running_gateway
from tests.test_feedback import SHOP_SQL, shop_source
from tests.waiting import eventually

CHAT = "oc_group"
OWNER = "ou_owner"  # the data owner of the `shop` source
NEVER_FINISHED = "East China fell first. " + "Then more detail follows. " * 80


async def post(gw: Gateway, payload: dict[str, Any]) -> dict[str, Any]:
    body = encrypted_body(payload)
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        assert resp.status == 200
        return await resp.json()


def question(message_id: str) -> dict[str, Any]:
    return text_event("@_user_1 how did GMV do?", mentions=[bot_mention()], chat_id=CHAT, message_id=message_id)


async def test_stop_button_ends_the_turn_and_feedback_buttons_rate_the_answer(tmp_path: Path) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.script(Reply([text(NEVER_FINISHED)], event_delay=0.1), Reply([text("GMV rose 3%.")]))
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu)
            async with running_gateway(settings) as gw:
                await post(gw, question("om_q1"))
                await eventually(lambda: any(m.msg_type == "interactive" for m in feishu.messages))
                [message] = [m for m in feishu.messages if m.msg_type == "interactive"]
                card = feishu.cards[message.content["data"]["card_id"]]
                await eventually(lambda: any("East China" in t for _, t, _ in card.element_updates))

                answer = await post(gw, card_click(card.card, "stop", "ou_asker", message_id=message.message_id, chat_id=CHAT))
                assert answer["toast"]["type"] == "success"
                await gw.settled(timeout=30)
                final = card.updates[-1]
                shown = final["body"]["elements"][0]["content"]
                assert shown.startswith("East China fell first.") and "_Stopped by" in shown
                assert NEVER_FINISHED.strip() not in shown
                assert len(anthropic.requests) == 1

                # The conversation goes on, and its answer carries 👍/👎.
                await post(gw, question("om_q2"))
                await gw.settled(timeout=30)
                last = [m for m in feishu.messages if m.msg_type == "interactive"][-1]
                answer_card = feishu.cards[last.content["data"]["card_id"]].updates[-1]
                assert answer_card["body"]["elements"][0]["content"] == "GMV rose 3%."
                up = card_click(answer_card, "feedback_up", "ou_asker", message_id=last.message_id, chat_id=CHAT)
                assert (await post(gw, up))["toast"]["type"] == "success"
                down = card_click(answer_card, "feedback_down", "ou_other", message_id=last.message_id, chat_id=CHAT)
                await post(gw, down)
                assert await FeedbackStore(gw.runtime.engine).totals() == {"helpful": 1, "not_helpful": 1}

                # A 👎 asks "what was wrong?" (optional) in a form replying to the answer.
                await eventually(lambda: any(m.reply_to == last.message_id for m in feishu.messages))
                [question_card] = [m for m in feishu.messages if m.reply_to == last.message_id]
                said = {"comment": "The October numbers are missing."}
                submit = form_submit(question_card.content, "comment_send", "ou_other", said,
                                     message_id=question_card.message_id, chat_id=CHAT)  # fmt: skip
                assert (await post(gw, submit))["toast"]["type"] == "success"
                [summary] = await FeedbackStore(gw.runtime.engine).summaries()
                assert summary.comments == ["feishu:ou_other: The October numbers are missing."]


async def test_a_thumbs_up_asks_the_feishu_data_owner_and_their_approval_teaches_the_example(
    database_url: str, tmp_path: Path
) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.script(
                Reply([tool_use("sql_query", {"sql": SHOP_SQL, "source": "shop"}, id="toolu_01")]),
                Reply([text("East leads with 120.")]),
                Reply([tool_use("search_schema", {"question": "which region has the most gmv"}, id="toolu_02")]),
                Reply([text("Using the verified example.")]),
            )
            shop = shop_source(tmp_path, f"feishu:{OWNER}")
            settings = feishu_gateway_settings(database_url, tmp_path, anthropic, feishu, **shop)
            async with running_gateway(settings) as gw:
                await post(gw, question("om_q1"))
                await gw.settled(timeout=30)
                [answer] = [m for m in feishu.messages if m.msg_type == "interactive"]
                answer_card = feishu.cards[answer.content["data"]["card_id"]].updates[-1]
                up = card_click(answer_card, "feedback_up", "ou_asker", message_id=answer.message_id, chat_id=CHAT)
                assert (await post(gw, up))["toast"]["type"] == "success"

                # The owner gets a review card in their chat with the bot, after the click's answer.
                await eventually(lambda: any(m.chat_id == OWNER for m in feishu.messages), 10, "the owner's review card")
                [review] = [m for m in feishu.messages if m.chat_id == OWNER]
                assert SHOP_SQL in json.dumps(review.content) and "ou_asker" in json.dumps(review.content)

                # Someone who is not an owner cannot decide; the owner can, and the card shows it.
                approve = card_click(review.content, "example_approve", "ou_asker", message_id=review.message_id, chat_id=OWNER)
                assert (await post(gw, approve))["toast"]["type"] == "warning"
                assert review.updates == []
                approve = card_click(review.content, "example_approve", OWNER, message_id=review.message_id, chat_id=OWNER)
                assert (await post(gw, approve))["toast"]["type"] == "success"
                shown = json.dumps(review.shown, ensure_ascii=False)
                assert f"Approved by <at id={OWNER}></at>" in shown and "example_approve" not in shown
                # A click naming no possible example is ignored (answered, nothing changed).
                hostile = card_action({"example_id": 10**30, "choice": "reject"}, open_id=OWNER, chat_id=OWNER)
                assert await post(gw, hostile) == {}

                await post(gw, question("om_q2"))
                await gw.settled(timeout=30)
                found = anthropic.requests[3].body["messages"][-1]["content"][0]["content"]
                assert SHOP_SQL in found
