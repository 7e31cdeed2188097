"""A scheduled report runs with its creator's access and is read where it posts: both policies
apply at once. A row must be allowed by both, a column visible to both -- through the tools,
and through the whole gateway, from the schedule's inbox event to the post in the channel."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.audience import Identity, access_note, audience_of, table_view
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.schedules.model import NewSchedule
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.sql import SqlQueryTool
from gateway.jobs.report_messages import report_message
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.harness import gateway_settings, running_gateway

POLICY = """\
groups:
  east_sales: [slack:U01EAST]
  finance: [slack:U02FIN]
  emea: [slack:U03EMEA]
sources:
  dwh:
    groups: [east_sales, finance, emea, default]
    tables:
      orders:
        row_filters:
          east_sales: "region = 'East'"
          emea: "region IN ('East', 'West')"
          finance: "true"
          default: "false"
        hidden_columns: [customer_email]
        column_grants: {finance: [customer_email], emea: [customer_email]}
  hr:
    groups: [finance]
channels:
  slack:C0FIN: finance
  slack:C0EMEA: emea
  slack:C0SALES: east_sales
  slack:C0HR: finance
"""
ROWS = [
    (1, "East", "east-buyer@secret.example", 301.5),
    (2, "West", "west-buyer@secret.example", 80.5),
    (3, "North", "north-buyer@secret.example", 7.0),
]
ALL_ROWS_SQL = "SELECT * FROM orders ORDER BY id"


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, DataSourceConfig]:
    configs = {}
    for name in ("dwh", "hr"):
        path = tmp_path / f"{name}.duckdb"
        with duckdb.connect(str(path)) as conn:
            conn.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, customer_email VARCHAR, amount DOUBLE)")
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ROWS)
        configs[name] = DataSourceConfig(name=name, url=f"duckdb:///{path}")
    return configs


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def policy(policy_file: Path) -> AccessPolicy:
    return load_policy(policy_file, {"dwh": "duckdb", "hr": "duckdb"})


def report_run(tmp_path: Path, creator: str, channel: str) -> RunContext:
    """The context a scheduled report's run gets: its creator, its target, its schedule."""
    return RunContext(
        thread_id=f"slack:T1:{channel}:schedule-7",
        data_dir=tmp_path / "data",
        channel=channel,
        user=creator,
        chat=ChatOrigin(platform="slack", workspace="T1"),
        scheduled_run="report:7",
    )


async def rows_seen(sources: dict[str, DataSourceConfig], policy: AccessPolicy, ctx: RunContext, source: str = "dwh") -> str:
    pipeline = ToolPipeline([SqlQueryTool(sources, access_policy=policy)])
    call = ToolUseBlock(id="toolu_report", name="sql_query", input={"source": source, "sql": ALL_ROWS_SQL})
    return (await pipeline.execute(call, ctx)).observation


def test_a_reports_view_is_what_both_its_creator_and_its_target_may_see(policy: AccessPolicy) -> None:
    orders = policy.sources["dwh"].tables["orders"]
    east_to_finance = audience_of(policy, Identity(platform="slack", user="U01EAST", channel="C0FIN", scheduled=True))
    view = table_view("orders", orders, east_to_finance)
    assert view.row_filters == ("region = 'East'",) and view.hidden_columns == {"customer_email"}
    note = access_note([view], east_to_finance) or ""
    assert "allowed for east_sales only" in note and "the creator's access and this channel's access" in note
    # Both restrict rows: a row must pass both filters (one condition, not either of them).
    east_to_emea = table_view(
        "orders", orders, audience_of(policy, Identity(platform="slack", user="U01EAST", channel="C0EMEA", scheduled=True))
    )
    assert east_to_emea.row_filters == ("((region = 'East')) AND ((region IN ('East', 'West')))",)
    # The same person asking live in that channel gets the channel's view, not the report's.
    live = table_view("orders", orders, audience_of(policy, Identity(platform="slack", user="U01EAST", channel="C0EMEA")))
    assert live.row_filters == ("region IN ('East', 'West')",) and not live.hidden_columns


async def test_an_east_only_creators_report_to_a_finance_channel_shows_east_rows_without_emails(
    sources: dict[str, DataSourceConfig], policy: AccessPolicy, tmp_path: Path
) -> None:
    seen = await rows_seen(sources, policy, report_run(tmp_path, "U01EAST", "C0FIN"))
    assert "East" in seen and "301.5" in seen
    assert "West" not in seen and "North" not in seen and "@secret" not in seen
    assert "per the creator's access and this channel's access" in seen


async def test_rows_must_pass_both_filters_and_columns_need_both_grants(
    sources: dict[str, DataSourceConfig], policy: AccessPolicy, tmp_path: Path
) -> None:
    east_to_emea = await rows_seen(sources, policy, report_run(tmp_path, "U01EAST", "C0EMEA"))
    assert "East" in east_to_emea and "West" not in east_to_emea and "North" not in east_to_emea
    assert "@secret" not in east_to_emea  # emea may read emails, the creator may not
    finance_to_sales = await rows_seen(sources, policy, report_run(tmp_path, "U02FIN", "C0SALES"))
    assert "East" in finance_to_sales and "West" not in finance_to_sales
    assert "@secret" not in finance_to_sales  # the creator may read emails, the channel may not
    finance_to_emea = await rows_seen(sources, policy, report_run(tmp_path, "U02FIN", "C0EMEA"))
    assert "east-buyer@secret.example" in finance_to_emea and "west-buyer@secret.example" in finance_to_emea
    assert "North" not in finance_to_emea
    finance_to_finance = await rows_seen(sources, policy, report_run(tmp_path, "U02FIN", "C0FIN"))
    assert "north-buyer@secret.example" in finance_to_finance and "Access policy" not in finance_to_finance


async def test_a_report_to_an_unconfigured_channel_or_a_closed_source_gets_nothing(
    sources: dict[str, DataSourceConfig], policy: AccessPolicy, tmp_path: Path
) -> None:
    east_to_general = await rows_seen(sources, policy, report_run(tmp_path, "U01EAST", "C0GENERAL"))
    assert "East" not in east_to_general and "North" not in east_to_general
    assert "no rows of orders are open here" in east_to_general
    # hr is open to the finance channel, but not to the report's East-only creator.
    refused = await rows_seen(sources, policy, report_run(tmp_path, "U01EAST", "C0HR"), source="hr")
    assert "permission_denied" in refused and "not open to this scheduled report" in refused
    assert "301.5" not in refused


def echo_rows(request: dict) -> Reply:
    """Plays the model: reads every order, then repeats what the tool returned."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": ALL_ROWS_SQL}, id="toolu_report")])
    content = results[0]["content"]
    body = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    return Reply([text(f"Report: {body}")])


async def test_a_fired_report_posts_only_what_creator_and_channel_both_may_see(
    sources: dict[str, DataSourceConfig], policy_file: Path, tmp_path: Path
) -> None:
    """From the schedule's row to the post: the inbox event of a run carries the schedule, and
    the run's identity joins the creator's access with the target channel's."""
    extra = {
        "BA_DATASOURCES": json.dumps({name: {"url": cfg.url} for name, cfg in sources.items()}),
        "BA_ACCESS_POLICY": str(policy_file),
    }
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(echo_rows)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **extra)
        async with running_gateway(settings) as gw:
            runtime = gw.runtime
            schedule = await runtime.schedules.create(
                NewSchedule(
                    creator="U01EAST", platform="slack", workspace="T1", channel="C0FIN",
                    cron="0 9 * * mon", tz="UTC", prompt="Orders by region, every Monday.",
                )
            )  # fmt: skip
            run = report_message(schedule, datetime(2026, 1, 5, 9, tzinfo=UTC))
            assert run.scheduled_run == f"report:{schedule.id}" and run.user == "U01EAST"
            await runtime.inbox.accept(run)
            await gw.settled(timeout=30)
        shown = json.dumps(slack.posted(channel="C0FIN"))  # every post, text, blocks and tables
        assert "Report:" in shown and "East" in shown and "301.5" in shown
        assert "West" not in shown and "North" not in shown and "@secret" not in shown
        assert "the creator's access" in shown
