"""The bot's own texts on Feishu, where the event states no locale: a question written in
Chinese gets the provenance line and the SQL panel's title in Chinese; one in English keeps
them English. Through the real gateway (lark-oapi, the anthropic SDK) against the fakes."""

from __future__ import annotations

from tests.fakes.anthropic_api import Reply, text, tool_use
from tests.test_provenance import WEEK_SQL, ask_feishu, feishu_stack, final_cards  # noqa: F401


async def test_a_chinese_question_on_feishu_gets_a_chinese_provenance_line(feishu_stack) -> None:  # noqa: F811
    gw, feishu, anthropic = feishu_stack
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week")]),
        Reply([text("上周 GMV 保持平稳。")]),
    )
    await ask_feishu(gw, "上周的 GMV 走势如何？")
    [card] = final_cards(feishu)
    answer, line, panel, feedback = card["body"]["elements"]  # 👍/👎 close the answer
    assert feedback["element_id"] == "feedback"
    assert answer["content"] == "上周 GMV 保持平稳。"
    assert line["content"] == (
        "<font color='grey'>来源: demo (sales) · 时间范围: 2026-10-25 至 2026-10-31 · 数据截至 2026-10-31 · 7 行</font>"
    )
    assert panel["header"]["title"]["content"] == "本回答所用的 SQL"


async def test_an_english_question_on_feishu_keeps_the_english_line(feishu_stack) -> None:  # noqa: F811
    gw, feishu, anthropic = feishu_stack
    anthropic.script(Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week")]), Reply([text("Steady.")]))
    await ask_feishu(gw, "how did GMV do last week?")
    [card] = final_cards(feishu)
    _, line, panel, _feedback = card["body"]["elements"]
    assert line["content"].startswith("<font color='grey'>Source: demo (sales) · Period: 2026-10-25 to 2026-10-31")
    assert panel["header"]["title"]["content"] == "SQL behind this answer"
