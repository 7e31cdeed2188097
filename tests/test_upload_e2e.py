"""A business user's upload, end to end on Slack: a CSV shared in a thread becomes a table, the
model's tool calls find the driver of the drop, and a chart and the answer land in the thread."""

from __future__ import annotations

import re

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import gateway_settings, running_gateway

THREAD = "1700000001.000100"


def sales_csv() -> bytes:
    """Forecast vs actual GMV per region and channel: East China / app fell short by 40 %."""
    rows = ["region,channel,predict,real"]
    for region in ("East China", "North China", "South China", "West China"):
        for channel, base in (("app", 1000.0), ("web", 700.0), ("offline", 400.0)):
            factor = 0.6 if (region, channel) == ("East China", "app") else 1.0
            rows.append(f"{region},{channel},{base:.2f},{base * factor * 1.01:.2f}")
    return ("\n".join(rows) + "\n").encode()


def scripted_model(request: dict) -> Reply:
    """Plays the model: reads what the tools really returned and answers from it."""
    messages = request["messages"]
    last = messages[-1]["content"]
    results = [b for b in last if b.get("type") == "tool_result"]
    if not results:
        note = " ".join(b.get("text", "") for b in last if b.get("type") == "text")
        table = re.search(r"loaded as table `([a-z0-9_]+)`", note)
        if table is None:
            return Reply([text("Please share the file with the numbers.")])
        name = table.group(1)
        return Reply([
            tool_use("attribute_change", {"sql": f"SELECT * FROM {name}", "dimensions": ["region", "channel"],
                                          "baseline_column": "predict", "actual_column": "real"}, id="toolu_attr"),
            tool_use("make_chart", {"chart_type": "bar", "title": "GMV 差异（按地区）",
                                    "sql": f"SELECT region, SUM(real) - SUM(predict) AS gap FROM {name} GROUP BY 1",
                                    "x": "region", "y": ["gap"]}, id="toolu_chart"),
        ])
    attribution = next(r for r in results if r["tool_use_id"] == "toolu_attr")["content"]
    region = re.search(r"(East|North|South|West) China", attribution)
    return Reply([text(f"The drop was driven by **{region.group(0) if region else 'no clear region'}**; chart attached.")])


async def test_csv_in_a_thread_answers_which_region_drove_the_drop(database_url, tmp_path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(scripted_model)
        async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
            await gw.post_event(app_mention("<@UBOT> I'll share our GMV forecast vs actual", "U1", "C1", ts=THREAD))
            await gw.settled()
            file = slack.add_file("sales.csv", sales_csv(), "text/csv", redirect=True)
            await gw.post_event(message("which region drove the drop?", "U1", "C1", ts="1700000009.000100",
                                        channel_type="channel", thread_ts=THREAD, files=[file]))
            await gw.settled(timeout=60)

        answers = [p["markdown_text"] for p in slack.posted(channel="C1", thread_ts=THREAD) if "markdown_text" in p]
        assert answers[-1].startswith("The drop was driven by **East China**")
        chart, data = slack.uploads
        assert data.filename.endswith(".csv") and data.thread_ts == THREAD
        assert chart.thread_ts == THREAD and chart.channel_id == "C1"
        assert chart.content.startswith(b"\x89PNG")
        # The file was fetched with the bot token, through Slack's redirect.
        assert slack.downloads == [file["id"]]


async def test_oversized_upload_is_explained_not_loaded(database_url, tmp_path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.script(Reply([text("That file is too large for me.")]))
        settings = gateway_settings(database_url, tmp_path, anthropic, slack, BA_MAX_UPLOAD_MB=1)
        async with running_gateway(settings) as gw:
            file = slack.add_file("big.csv", b"a,b\n" + b"1,2\n" * 400_000, "text/csv")
            await gw.post_event(message("here is the data", "U1", "D1", ts="1700000002.000100", channel_type="im", files=[file]))
            await gw.settled()
        note = anthropic.last_request.body["messages"][0]["content"][0]["text"]
        assert "big.csv: could not be fetched" in note and "larger than the 1 MB limit" in note
