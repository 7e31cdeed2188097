"""Answers that show their work: an answer built on data ends with a provenance line (sources
and tables or metrics, period, freshness, rows) made from the turn's own queries, with the SQL
as executed one click away -- a folded attachment in Slack, a collapsed panel in a Feishu card.

Through the real gateway (slack-bolt, lark-oapi, the anthropic SDK) against the local fakes,
with a scripted model over the demo data."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import aiohttp
import duckdb
import pytest
from aiohttp.test_utils import TestServer
from slack_sdk.web.async_client import AsyncWebClient

from adapters.feishu.client import FeishuClient
from adapters.feishu.responder import FeishuResponder
from adapters.slack.responder import SlackResponder
from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.loader import load_policy
from agent_core.messages import InboundMessage, OutboundReply, ThreadKey, ToolUseBlock
from agent_core.provenance import DataAccess, Provenance
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.sql import SqlQueryTool
from gateway.service.app import RUNNER_OPTIONS, create_app
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import bot_mention, encrypted_body, signed_headers, text_event
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import Gateway, feishu_gateway_settings, gateway_settings, running_gateway
from tests.policies import EAST_ONLY_POLICY
from tests.test_feishu_adapter import fake_config, group_mention
from tests.test_metrics_e2e import (  # the warehouse fixtures are shared with test_metrics_e2e
    EAST_GMV,
    metrics_analyst,
    mysql_warehouse,  # noqa: F401
    pg_warehouse,  # noqa: F401
    semantic_dir,
)
from tests.test_semantic import ORDERS

THREAD = "1700000001.000100"
# The last week of the demo data: 7 days, 2026-10-25 to 2026-10-31.
WEEK_SQL = "SELECT date, SUM(gmv) AS gmv FROM demo.sales WHERE date >= DATE '2026-10-25' GROUP BY date ORDER BY date"
WEEK_LINE = "Source: demo (sales) · Period: 2026-10-25 to 2026-10-31 · Data as of 2026-10-31 · 7 rows"
# The model's own claim about its sources: text like any other, never the provenance line.
FAKE_SOURCE = "Source: warehouse.secret_table · 999,999 rows"


@pytest.fixture
async def slack_stack(tmp_path: Path):
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack)
        async with running_gateway(settings) as gw:
            yield gw, anthropic, slack


def thread_of(slack: FakeSlack) -> list[dict[str, Any]]:
    return slack.posted(channel="C1", thread_ts=THREAD)


def answers(slack: FakeSlack) -> list[str]:
    return [m["markdown_text"] for m in thread_of(slack) if "markdown_text" in m]


def provenance_messages(slack: FakeSlack) -> list[dict[str, Any]]:
    return [m for m in thread_of(slack) if m.get("attachments")]


async def test_a_slack_answer_from_sql_ends_with_its_provenance_and_sql(slack_stack) -> None:
    gw, anthropic, slack = slack_stack
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week")]),
        Reply([text(f"GMV held steady all week.\n\n{FAKE_SOURCE}")]),
    )
    await gw.post_event(app_mention("<@UBOT> how did GMV do last week?", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=30)

    assert answers(slack) == [f"GMV held steady all week.\n\n{FAKE_SOURCE}"]  # the model's text as written
    [footer] = provenance_messages(slack)
    assert footer is thread_of(slack)[-1]  # it ends the answer
    line, feedback = footer["blocks"]  # the provenance line, then 👍/👎 closing the answer
    assert line == {"type": "context", "elements": [{"type": "mrkdwn", "text": WEEK_LINE}]}
    assert feedback["type"] == "context_actions"
    [sql] = footer["attachments"]
    assert sql["title"] == "SQL behind this answer"
    shown = html.unescape(sql["text"])  # Slack's mrkdwn escapes &, < and >; the reader sees them
    assert shown.startswith("```\n-- demo\nSELECT date, SUM(gmv) AS gmv FROM demo.sales WHERE date >= ")
    assert shown.endswith("ORDER BY date;\n```")
    assert "secret_table" not in str(footer)


async def test_an_answer_without_data_has_no_provenance_line(slack_stack) -> None:
    gw, anthropic, slack = slack_stack
    anthropic.script(Reply([text(f"Hello! Ask me about your sales.\n\n{FAKE_SOURCE}")]))
    await gw.post_event(app_mention("<@UBOT> hi", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=30)
    [answer] = thread_of(slack)
    assert answer["markdown_text"] == f"Hello! Ask me about your sales.\n\n{FAKE_SOURCE}"
    assert "attachments" not in answer
    assert [b["type"] for b in answer["blocks"]] == ["context_actions"]  # 👍/👎 only: no provenance line


async def test_a_delivery_resumed_after_a_failure_posts_answer_chart_and_provenance_once(
    slack_stack, tmp_path: Path
) -> None:
    gw, anthropic, slack = slack_stack
    chart = {
        "chart_type": "bar",
        "title": "GMV by region",
        "sql": "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY region ORDER BY region",
        "x": "region",
        "y": ["gmv"],
    }
    anthropic.script(Reply([tool_use("make_chart", chart, id="toolu_chart")]), Reply([text("Chart attached.")]))
    # The first attempt posts the answer, then fails at the chart: the retry resumes the delivery.
    slack.fail_next("files.getUploadURLExternal", error="internal_error", status=200, retry_after=None)
    await gw.post_event(app_mention("<@UBOT> chart GMV by region", "U1", "C1", ts=THREAD))
    await gw.settled(timeout=60)

    # The chart failed once, then the resumed delivery posted it and its data CSV.
    assert len(slack.calls_to("files.getUploadURLExternal")) == 3
    assert answers(slack) == ["Chart attached."]
    upload, data = slack.uploads
    assert upload.thread_ts == THREAD and upload.content.startswith(b"\x89PNG")
    assert data.thread_ts == THREAD and data.filename.endswith(".csv")
    [footer] = provenance_messages(slack)
    assert footer is thread_of(slack)[-1]
    regions = len(demo_regions(tmp_path))
    assert footer["text"] == f"Source: demo (sales) · {regions} rows"
    assert "GROUP BY region ORDER BY region;" in footer["attachments"][0]["text"]


async def test_a_delivery_repeated_after_it_was_all_posted_posts_nothing_again() -> None:
    access = DataAccess(source="demo", tables=["sales"], rows=3, sql="SELECT region FROM demo.sales GROUP BY 1")
    reply = OutboundReply(text="Three regions.", provenance=Provenance.of([access]))
    key = ThreadKey(platform="slack", workspace="T1", channel="C1", root=THREAD)
    msg = InboundMessage(platform="slack", event_id="Ev1", message_id=THREAD, workspace="T1", channel="C1",
                         thread=key, reply_in_thread=THREAD, user="U1", text="regions?")
    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        slack.add_message("C1", "<@UBOT> regions?", "U1", ts=THREAD)
        responder = SlackResponder(AsyncWebClient(base_url=slack.base_url, token="xoxb-test"))
        await responder.deliver(msg, reply, "d-1")
        await responder.deliver(msg, reply, "d-1", resumed=True)  # the crash came after posting
        await responder.close()
        assert answers(slack) == ["Three regions."]
        [footer] = provenance_messages(slack)
        assert footer["text"] == "Source: demo (sales) · 3 rows"


def demo_regions(data_dir: Path) -> list[str]:
    with duckdb.connect(str(data_dir / "demo" / "demo.duckdb"), read_only=True) as conn:
        return [r[0] for r in conn.execute("SELECT DISTINCT region FROM sales").fetchall()]


@pytest.mark.parametrize(("warehouse", "kind"), [("pg_warehouse", "pg"), ("mysql_warehouse", "mysql")])
async def test_a_yaml_metric_answer_names_the_metric_and_the_warehouse_table(
    warehouse: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    wh = request.getfixturevalue(warehouse)
    extra = {
        "BA_DATASOURCES": json.dumps({"dwh": {"url": wh[0], "allowed_channels": ["C1"]}}),
        "BA_SEMANTIC_DIR": str(semantic_dir(tmp_path / "semantic", wh, kind)),
    }
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(metrics_analyst)  # a wrong metric name first, then gmv by region
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **extra)
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> what was GMV in East?", "U1", "C1", ts=THREAD))
            await gw.settled(timeout=60)
        assert answers(slack) == [f"East GMV is {EAST_GMV:.2f} (metric gmv: sum of order amounts)."]
        [footer] = provenance_messages(slack)
    regions = len({order[2] for order in ORDERS})
    source, metrics, rows = footer["text"].split(" · ")  # the failed call read nothing: one query
    assert source.startswith("Source: dwh (") and source.endswith("orders)")
    assert (metrics, rows) == ("Metrics: gmv", f"{regions} rows")
    assert "GROUP BY" in footer["attachments"][0]["text"]


# --- Feishu -------------------------------------------------------------------------------------


@pytest.fixture
async def feishu_stack(tmp_path: Path):
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu)
            server = TestServer(create_app(settings))
            await server.start_server(**RUNNER_OPTIONS)
            try:
                async with aiohttp.ClientSession() as http:
                    yield Gateway(server, http), feishu, anthropic
            finally:
                await server.close()


async def ask_feishu(gw: Gateway, question: str) -> None:
    body = encrypted_body(text_event(f"@_user_1 {question}", mentions=[bot_mention()]))
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
        assert resp.status == 200
    await gw.settled(timeout=30)


def final_cards(feishu: FakeFeishu) -> list[dict[str, Any]]:
    """Each card the user sees, in its final state (a streamed card's last update)."""
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


async def test_a_feishu_card_ends_with_the_line_and_the_sql_in_a_collapsed_panel(feishu_stack) -> None:
    gw, feishu, anthropic = feishu_stack
    metric = {"metrics": ["gmv"], "grain": "month", "start": "2026-06-01", "end": "2026-08-31"}
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": WEEK_SQL}, id="toolu_week"), tool_use("query_metric", metric, id="toolu_gmv")]),
        Reply([text(f"**GMV** grew every month.\n\n{FAKE_SOURCE}")]),
    )
    await ask_feishu(gw, "how is GMV trending?")

    [card] = final_cards(feishu)
    answer, line, panel, feedback = card["body"]["elements"]  # 👍/👎 close the answer
    assert feedback["element_id"] == "feedback"
    assert answer["content"] == f"**GMV** grew every month.\n\n{FAKE_SOURCE}"
    assert line["content"] == (
        "<font color='grey'>Source: demo (sales) · Metrics: gmv · Period: 2026-06-01 to 2026-10-31 · "
        "Data as of 2026-10-31 · 10 rows from 2 queries</font>"
    )
    assert panel["tag"] == "collapsible_panel" and panel["expanded"] is False
    assert panel["header"]["title"]["content"] == "SQL behind this answer"
    [sql] = panel["elements"]
    assert sql["content"].startswith("```sql\n-- demo\nSELECT date, SUM(gmv) AS gmv FROM demo.sales")
    assert "CAST('2026-06-01' AS DATE)" in sql["content"] and sql["content"].endswith(";\n```")


async def test_a_feishu_answer_without_data_is_the_answer_alone(feishu_stack) -> None:
    gw, feishu, anthropic = feishu_stack
    anthropic.script(Reply([text(f"Hello!\n\n{FAKE_SOURCE}")]))
    await ask_feishu(gw, "hi")
    [card] = final_cards(feishu)
    answer, feedback = card["body"]["elements"]  # the answer, then 👍/👎 only
    assert answer["content"] == f"Hello!\n\n{FAKE_SOURCE}" and feedback["element_id"] == "feedback"


async def test_a_long_feishu_answer_keeps_every_card_within_limits_and_ends_with_the_panel() -> None:
    long_sql = "SELECT " + ", ".join(f"SUM(gmv) AS gmv_{i}" for i in range(400)) + " FROM demo.sales"
    access = DataAccess(source="demo", tables=["sales"], rows=1, sql=long_sql)
    paragraphs = [f"Paragraph {i}: " + "GMV grew in every region. " * 60 for i in range(40)]
    reply = OutboundReply(text="\n\n".join(paragraphs), provenance=Provenance.of([access]))
    with FakeFeishu() as fake:
        client = FeishuClient(fake_config(fake), backoff_base_s=0.05)
        responder = FeishuResponder(client, fake_config(fake, streaming_cards=False))
        await responder.deliver(group_mention(), reply, "d-long")
        await client.aclose()
        cards = [m.content for m in fake.messages]  # the fake refuses content over 30 KB
    assert len(cards) > 2 and all(m.msg_type == "interactive" for m in fake.messages)
    assert [len(c["body"]["elements"]) for c in cards] == [1] * (len(cards) - 1) + [3]
    panel = cards[-1]["body"]["elements"][2]
    assert "-- (cut here:" in panel["elements"][0]["content"]  # SQL this long is cut, and says so


# --- what is recorded -----------------------------------------------------------------------------



async def test_the_recorded_sql_is_the_sql_the_access_policy_let_run(tmp_path: Path) -> None:
    path = tmp_path / "dwh.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, ordered_at DATE, amount DOUBLE)")
        conn.execute("INSERT INTO orders VALUES (1, 'East', DATE '2026-01-03', 100), (2, 'West', DATE '2026-02-01', 7)")
    (tmp_path / "access.yaml").write_text(EAST_ONLY_POLICY)
    policy = load_policy(tmp_path / "access.yaml", {"dwh": "duckdb"})
    sources = {"dwh": DataSourceConfig(name="dwh", url=f"duckdb://{path}")}
    ctx = RunContext(
        thread_id="slack:T1:D1:1.1",
        data_dir=tmp_path / "data",
        channel="D1",
        user="U01EAST",
        is_dm=True,
        chat=ChatOrigin(platform="slack", workspace="T1"),
    )
    pipeline = ToolPipeline([SqlQueryTool(sources, access_policy=policy)])
    call = ToolUseBlock(id="c1", name="sql_query", input={"source": "dwh", "sql": "SELECT * FROM orders"})
    assert not (await pipeline.execute(call, ctx)).is_error

    provenance = Provenance.of(ctx.turn.data_used)
    assert provenance is not None
    [access] = provenance.accesses
    assert (access.source, access.tables, access.rows) == ("dwh", ["orders"], 1)
    assert "region = 'East'" in access.sql  # what ran, not what the model wrote
    assert provenance.summary_line() == (
        "Source: dwh (orders) · Period: 2026-01-03 to 2026-01-03 · Data as of 2026-01-03 · 1 row"
        " · Limited by the access policy to what may be shown here"  # the row filter shaped it
    )
