"""Metric monitors end to end on Feishu: the real gateway and lark-oapi client against the fake
Feishu API, the demo data with its injected drop (East China's app GMV falls about 40 % from
2026-10-20 to 2026-10-22), a scripted clock.

The alert is an interactive card with Acknowledge / Mute 7 days buttons; a click comes back as a
`card.action.trigger` callback — encrypted and signed on the webhook, or as a long-connection
frame — is answered with a toast for the clicker, and the card then shows who acted. A monitor
made in a Chinese conversation alerts in Chinese.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_core.data.demo import DEMO_ANOMALIES
from gateway.jobs.monitors import monitor_job_id
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu, SentMessage
from tests.fakes.feishu_events import (
    TENANT_KEY,
    USER_OPEN_ID,
    bot_mention,
    card_click,
    encrypted_body,
    signed_headers,
    text_event,
)
from tests.harness import Gateway, feishu_gateway_settings, running_gateway
from tests.waiting import eventually

CHAT, OPS, ANALYST, LATECOMER = "oc_sales", "ou_ops", "ou_analyst", "ou_late"
MONITOR = "gmv-by-region"
MONITORS_YAML = f"""\
monitors:
  - name: {MONITOR}
    metric: gmv
    dimensions: [region, channel, category]
    cron: "0 9 * * *"
    timezone: Asia/Shanghai
    platform: feishu
    workspace: {TENANT_KEY}
    channel: {CHAT}
    creator: {OPS}
"""
DROP = DEMO_ANOMALIES[0]


def morning(day: int) -> datetime:
    """09:00 in Shanghai on 2026-10-<day>: the run that judges the day before."""
    return datetime(2026, 10, day, 1, 0, tzinfo=UTC)


async def run_at(gw: Gateway, name: str, day: int) -> bool:
    await gw.runtime.monitor_jobs.sync()
    return await gw.runtime.scheduler.run(monitor_job_id(name), morning(day))


def alert_cards(feishu: FakeFeishu) -> list[SentMessage]:
    return [m for m in feishu.messages if m.chat_id == CHAT and m.msg_type == "interactive" and m.reply_to is None]


def buttons(card: dict[str, Any]) -> list[str]:
    return [
        element["text"]["content"]
        for block in card["body"]["elements"]
        for column in block.get("columns", [])
        for element in column["elements"]
        if element.get("tag") == "button"
    ]


def shown(card: dict[str, Any]) -> str:
    return json.dumps(card, ensure_ascii=False)


def click(alert: SentMessage, button: str, user: str) -> dict[str, Any]:
    """``user`` clicks ``button`` on the alert card as it was posted (a client that has not
    refreshed yet still shows the buttons)."""
    return card_click(alert.content, button, user, message_id=alert.message_id, chat_id=CHAT)


async def post_callback(gw: Gateway, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body = encrypted_body(payload)
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        return resp.status, await resp.json()


async def test_an_alert_card_is_acknowledged_with_its_button_and_its_recovery_noted(tmp_path: Path) -> None:
    monitors_file = tmp_path / "monitors.yml"
    monitors_file.write_text(MONITORS_YAML)
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(
                f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu, BA_MONITORS_FILE=str(monitors_file)
            )
            async with running_gateway(settings) as gw:
                assert await run_at(gw, MONITOR, 20)  # a normal Monday: nothing
                assert feishu.messages == []

                assert await run_at(gw, MONITOR, 21)  # the outage's first day
                [alert] = alert_cards(feishu)
                card = shown(alert.content)
                assert "gmv dropped (region=East China) on 2026-10-20" in card
                assert f"region={DROP.regions[0]} & channel={DROP.channels[0]}" in card  # the root cause
                assert "Source: demo (sales)" in card  # the provenance line
                assert buttons(alert.content) == ["Acknowledge", "Mute 7 days"]
                [chart] = [m for m in feishu.messages if m.msg_type == "image"]
                assert chart.reply_to == alert.message_id and chart.reply_in_thread

                for day in (22, 23):  # the drop persists: no second alert
                    assert await run_at(gw, MONITOR, day)
                assert len(alert_cards(feishu)) == 1

                forged = click(alert, "acknowledge", ANALYST)
                forged["header"]["token"] = "not-the-token"
                assert (await post_callback(gw, forged))[0] == 401  # verified like events
                assert alert.updates == []

                # Anyone in the chat may act on an alert, as on Slack.
                assert await post_callback(gw, click(alert, "acknowledge", ANALYST)) == (
                    200, {"toast": {"type": "success", "content": "Acknowledged."}},
                )  # fmt: skip
                acknowledged = alert.shown
                assert buttons(acknowledged) == [] and acknowledged["header"]["template"] == "green"
                assert f"Acknowledged by <at id={ANALYST}></at>" in shown(acknowledged)

                status, late = await post_callback(gw, click(alert, "mute", LATECOMER))  # too late
                assert status == 200 and late["toast"]["type"] == "warning"
                assert late["toast"]["content"] == "Already done: someone else acknowledged this alert."
                assert "Acknowledged by" in shown(alert.shown)  # the latecomer muted nothing
                assert len(alert.updates) == 1  # …nor re-sent the card unchanged
                assert (await gw.runtime.monitors.state(MONITOR)).muted_until is None

                assert await run_at(gw, MONITOR, 24)  # judges 2026-10-23: recovered
                notes = [m for m in feishu.messages if m.reply_to == alert.message_id and m.msg_type != "image"]
                [note] = notes
                assert note.reply_in_thread
                assert "Recovered: gmv is back within its normal range on 2026-10-23" in shown(note.content)
                assert len(alert_cards(feishu)) == 1


def monitor_maker(request: dict) -> Reply:
    """Plays the model: creates the monitor the user asked for, then confirms it."""
    last = request["messages"][-1]["content"]
    if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
        watch = {
            "name": "gmv-zh", "metric": "gmv", "dimensions": ["region", "channel", "category"],
            "cron": "0 9 * * *", "timezone": "Asia/Shanghai",
        }  # fmt: skip
        return Reply([tool_use("create_monitor", watch, id="toolu_monitor")])
    return Reply([text("好的，每天早上 9 点检查 GMV。")])


async def test_a_chinese_creators_alert_is_in_chinese_and_muted_over_the_long_connection(tmp_path: Path) -> None:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.respond_with(monitor_maker)
            settings = feishu_gateway_settings(
                f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu,
                FEISHU_MODE="websocket", FEISHU_STREAMING_CARDS=False,
            )  # fmt: skip
            async with running_gateway(settings) as gw:
                await eventually(lambda: feishu.ws_open)
                ask = "@_user_1 每天早上 9 点帮我盯着各区域的 GMV，有异常就在这个群里告诉我"
                feishu.ws_push_event(text_event(ask, mentions=[bot_mention()], chat_id=CHAT, message_id="om_ask"))
                await eventually(lambda: any(m.reply_to == "om_ask" for m in feishu.messages), timeout=30)
                await gw.settled(timeout=30)
                monitor = await gw.runtime.monitors.get("gmv-zh")
                assert monitor is not None and monitor.creator == USER_OPEN_ID and monitor.channel == CHAT

                assert await run_at(gw, "gmv-zh", 21)
                [alert] = alert_cards(feishu)
                card = shown(alert.content)
                assert "gmv 下降（region=East China），日期 2026-10-20" in card
                assert "**根本原因：**" in card and "来源: demo (sales)" in card
                assert buttons(alert.content) == ["确认", "静音 7 天"]

                frame = feishu.ws_push_event(click(alert, "mute", ANALYST))
                await eventually(lambda: any(a["message_id"] == frame for a in feishu.ws_acks))
                toast = feishu.ws_callback_answer(frame)["toast"]
                assert toast["type"] == "success" and toast["content"].startswith("已静音：此监控在 ")
                muted = alert.shown
                assert buttons(muted) == [] and muted["header"]["template"] == "grey"
                assert f"已由 <at id={ANALYST}></at> 静音至" in shown(muted)
                state = await gw.runtime.monitors.state("gmv-zh")
                assert state.muted_until is not None and state.muted_by == ANALYST
