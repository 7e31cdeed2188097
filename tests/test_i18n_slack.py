"""The bot's own texts in the Slack user's language, end to end: the locale Slack states for the
user (``users.info``), else the language they wrote in. Through the real gateway (slack-bolt,
the anthropic SDK) against the local fakes."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, HttpError, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import Gateway, gateway_settings, running_gateway
from tests.test_approval_slack import APPROVE_ACTION, CHANNEL, STRANGER, analyst, click
from tests.test_approval_slack import settings_extra as approval_settings  # noqa: F401

THREAD = "1700000001.000100"
# The last week of the demo data: 7 days, 2026-10-25 to 2026-10-31.
WEEK_SQL = "SELECT date, SUM(gmv) AS gmv FROM demo.sales WHERE date >= DATE '2026-10-25' GROUP BY date ORDER BY date"


@pytest.fixture
async def stack(database_url: str, tmp_path: Path):
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_user("UZH", "Li Lei", locale="zh-CN")
        slack.add_user("UEN", "Ada Lovelace", locale="en-US")
        async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
            yield gw, anthropic, slack


async def _ask_with_the_model_down(gw: Gateway, anthropic: FakeAnthropic, slack: FakeSlack, user: str, question: str) -> str:
    anthropic.script(*[HttpError(529, retry_after=0.01)] * 3)
    await gw.post_event(app_mention(f"<@UBOT> {question}", user, "C1", ts=THREAD))
    await gw.settled(timeout=30)
    [apology] = slack.posted(channel="C1", thread_ts=THREAD)
    return str(apology["markdown_text"])


async def test_a_chinese_slack_user_gets_the_apology_in_chinese(stack) -> None:
    gw, anthropic, slack = stack
    apology = await _ask_with_the_model_down(gw, anthropic, slack, "UZH", "how did GMV do last week?")
    assert apology.startswith("抱歉，分析模型目前过载，重试后仍未成功，请几分钟后再试。（参考编号 ")
    [lookup] = slack.calls_to("users.info")
    assert lookup.params["user"] == "UZH"


async def test_an_english_slack_user_gets_it_in_english_even_writing_chinese(stack) -> None:
    gw, anthropic, slack = stack
    apology = await _ask_with_the_model_down(gw, anthropic, slack, "UEN", "上周 GMV 怎么样？")
    assert apology.startswith("Sorry, the analysis model is overloaded right now;")


async def test_a_user_without_a_known_locale_writing_chinese_gets_chinese(stack) -> None:
    gw, anthropic, slack = stack
    # U404 is unknown to users.info: no locale, so the message's language decides.
    apology = await _ask_with_the_model_down(gw, anthropic, slack, "U404", "上周华东区的 GMV 怎么样？")
    assert apology.startswith("抱歉，分析模型目前过载")


async def test_a_chinese_users_progress_line_and_provenance_are_chinese(stack) -> None:
    gw, anthropic, slack = stack
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week")]),
        Reply([text("上周 GMV 保持平稳。")]),
        Reply([text("没有变化。")]),
    )
    # A thread of the assistant's DM: Slack shows a status line there.
    await gw.post_event(message("上周 GMV 怎么样？", "UZH", "D1", ts="1700000002.000100", thread_ts=THREAD))
    await gw.settled(timeout=30)
    # While working, then the step, then cleared with the answer.
    statuses = [c.params["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses == ["正在处理…", "正在查询数据…", ""]
    answer, footer = slack.posted(channel="D1", thread_ts=THREAD)
    assert answer["markdown_text"] == "上周 GMV 保持平稳。"
    assert footer["blocks"][0]["elements"][0]["text"] == (
        "来源: demo (sales) · 时间范围: 2026-10-25 至 2026-10-31 · 数据截至 2026-10-31 · 7 行"
    )
    [sql] = footer["attachments"]
    assert sql["title"] == "本回答所用的 SQL"
    assert html.unescape(sql["text"]).startswith("```\n-- demo\nSELECT date")

    # The locale was asked for once; the user's next message uses what Slack said then.
    await gw.post_event(message("还有别的吗？", "UZH", "D1", ts="1700000003.000100", thread_ts=THREAD))
    await gw.settled(timeout=30)
    assert len(slack.calls_to("users.info")) == 1


async def test_an_english_users_progress_line_and_provenance_stay_english(stack) -> None:
    gw, anthropic, slack = stack
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week")]),
        Reply([text("GMV held steady.")]),
    )
    await gw.post_event(message("how did GMV do last week?", "UEN", "D1", ts="1700000002.000100", thread_ts=THREAD))
    await gw.settled(timeout=30)
    statuses = [c.params["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses == ["is working on it…", "Querying the data…", ""]
    _, footer = slack.posted(channel="D1", thread_ts=THREAD)
    assert footer["blocks"][0]["elements"][0]["text"].startswith("Source: demo (sales) · Period: 2026-10-25 to 2026-10-31")
    assert footer["attachments"][0]["title"] == "SQL behind this answer"


async def test_a_chinese_askers_approval_request_and_notes_are_chinese(
    database_url: str, tmp_path: Path, approval_settings: dict[str, Any]  # noqa: F811
) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_user("UZH", "Li Lei", locale="zh-CN")
        anthropic.respond_with(analyst)
        settings = gateway_settings(database_url, tmp_path, anthropic, slack, **approval_settings)
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> 各区域的订单总额是多少？", "UZH", CHANNEL, ts=THREAD))
            await gw.settled(timeout=30)
            [post] = slack.posted(channel=CHANNEL, thread_ts=THREAD)
            assert post["text"] == "对 dwh 的查询需要审批"
            blocks = json.dumps(post["blocks"], ensure_ascii=False)
            assert "*需要审批*：对 `dwh` 的一次查询" in blocks and "*审批人：* <@UZH> 或 `finance` 的成员" in blocks
            buttons = [e["text"]["text"] for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]]
            assert buttons == ["批准", "拒绝"]
            assert await click(gw, slack, APPROVE_ACTION, STRANGER, on=post) == 200
            [note] = slack.ephemerals
            assert note["text"] == "你无权审批这个请求：只有提问人或 finance 的成员可以决定。"
