"""The Feishu bot menu end to end: `application.bot.menu_v6` events through the signed,
encrypted webhook, answered to the clicking user in their language — a new analysis, their
metric monitors, their scheduled reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lark_oapi as lark
from lark_oapi.api.application.v6 import P2ApplicationBotMenuV6

from agent_core.monitors.model import Monitor
from agent_core.schedules.model import NewSchedule
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.feishu_api import FakeFeishu, SentMessage
from tests.fakes.feishu_events import TENANT_KEY, bot_menu_event, encrypted_body, signed_headers, text_event
from tests.harness import Gateway, feishu_gateway_settings, running_gateway

ZHANG, ALICE = "ou_zhang", "ou_alice"


async def post(gw: Gateway, payload: dict[str, Any]) -> int:
    body = encrypted_body(payload)
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        return resp.status


def to(feishu: FakeFeishu, open_id: str) -> list[SentMessage]:
    return [m for m in feishu.messages if m.chat_id == open_id]


def shown(message: SentMessage) -> str:
    return json.dumps(message.content, ensure_ascii=False)


def test_the_fake_menu_event_is_what_lark_oapi_reads() -> None:
    event = lark.JSON.unmarshal(json.dumps(bot_menu_event("my_monitors", open_id=ZHANG, name="张三")), P2ApplicationBotMenuV6)
    assert event.header.event_type == "application.bot.menu_v6"
    assert event.event.event_key == "my_monitors" and event.event.operator.operator_id.open_id == ZHANG
    assert event.event.operator.operator_name == "张三"


async def test_menu_items_are_answered_to_the_user_in_their_language(tmp_path: Path) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu)
            async with running_gateway(settings) as gw:
                watch = Monitor(name="gmv-east", metric="gmv", dimensions=["region"], cron="0 9 * * *",
                                timezone="Asia/Shanghai", platform="feishu", workspace=TENANT_KEY,
                                channel="oc_sales", creator=ZHANG)  # fmt: skip
                await gw.runtime.monitors.create(watch)
                report = NewSchedule(creator=ALICE, platform="feishu", workspace=TENANT_KEY, channel="oc_sales",
                                     cron="0 9 * * 1", tz="Asia/Shanghai", prompt="weekly GMV by region")  # fmt: skip
                await gw.runtime.schedules.create(report)

                click = bot_menu_event("my_monitors", open_id=ZHANG, name="张三")
                assert await post(gw, click) == 200
                assert await post(gw, click) == 200  # a redelivery is answered once
                assert await post(gw, bot_menu_event("my_reports", open_id=ZHANG, name="张三")) == 200
                assert await post(gw, bot_menu_event("my_reports", open_id=ALICE, name="Alice")) == 200
                assert await post(gw, bot_menu_event("my_monitors", open_id=ALICE, name="Alice")) == 200
                await gw.settled()

                monitors_zh, reports_zh = to(feishu, ZHANG)
                assert "你的指标监控：" in shown(monitors_zh) and "gmv-east" in shown(monitors_zh)
                assert "你还没有定时报告" in shown(reports_zh)
                reports_en, monitors_en = to(feishu, ALICE)
                assert "Your scheduled reports:" in shown(reports_en) and "weekly GMV by region" in shown(reports_en)
                assert "You have no metric monitors." in shown(monitors_en) and "gmv-east" not in shown(monitors_en)
                assert [c.query["receive_id_type"] for c in feishu.calls_to("message.create")] == ["open_id"] * 4
                assert anthropic.requests == []  # menus are answered without the model


async def test_new_analysis_from_the_menu_starts_a_fresh_dm_conversation(tmp_path: Path) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.script(Reply([text("GMV was 1.2M.")]), Reply([text("A fresh start.")]))
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu,
                                               FEISHU_STREAMING_CARDS=False)  # fmt: skip
            async with running_gateway(settings) as gw:
                dm = {"chat_type": "p2p", "chat_id": "oc_dm_alice", "sender_open_id": ALICE}
                assert await post(gw, text_event("GMV yesterday?", **dm)) == 200
                await gw.settled()
                assert await post(gw, bot_menu_event("new_analysis", open_id=ALICE, name="Alice")) == 200
                await gw.settled()
                [fresh] = to(feishu, ALICE)
                assert "Started a fresh conversation" in shown(fresh)
                assert await post(gw, text_event("orders by region?", **dm)) == 200
                await gw.settled()
                assert len(anthropic.requests[-1].body["messages"]) == 1  # the earlier exchange is gone
