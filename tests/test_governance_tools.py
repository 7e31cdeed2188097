"""The access policy through the tools a conversation uses (sql_query, describe_table,
list_tables) and through `ba-agent tool run … --platform --user [--channel]`, on a DuckDB source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest

from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.data_tools import DescribeTableTool, ListTablesTool
from agent_core.tools.sql import SqlQueryTool
from tests.policies import sales_policy
from tests.serve_process import BA_AGENT, clean_env
from tests.waiting import scaled

POLICY = sales_policy(hidden_columns=["customer_email"], hr_source=True, channels={"slack:C0SALES": "east_sales"})
ROWS = [
    (1, "East", "e1@secret.example", 100.0),
    (2, "East", "e2@secret.example", 200.0),
    (3, "West", "w3@secret.example", 7000.0),
]


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, DataSourceConfig]:
    configs = {}
    for name in ("dwh", "hr", "open"):
        path = tmp_path / f"{name}.duckdb"
        with duckdb.connect(str(path)) as conn:
            conn.execute("CREATE TABLE orders (id INTEGER, region VARCHAR, customer_email VARCHAR, amount DOUBLE)")
            conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ROWS)
        configs[name] = DataSourceConfig(name=name, url=f"duckdb://{path}")
    return configs


@pytest.fixture
def policy(tmp_path: Path, sources: dict[str, DataSourceConfig]) -> AccessPolicy:
    path = tmp_path / "access.yaml"
    path.write_text(POLICY)
    return load_policy(path, {name: "duckdb" for name in sources})


@pytest.fixture
def pipeline(sources: dict[str, DataSourceConfig], policy: AccessPolicy) -> ToolPipeline:
    return ToolPipeline(
        [
            SqlQueryTool(sources, access_policy=policy),
            DescribeTableTool(sources, access_policy=policy),
            ListTablesTool(sources, access_policy=policy),
        ]
    )


def as_person(tmp_path: Path, user: str, channel: str | None = None) -> RunContext:
    return RunContext(
        thread_id=f"slack:T1:{channel or 'D1'}:1.1",
        data_dir=tmp_path / "data",
        channel=channel or "D1",
        user=user,
        is_dm=channel is None,
        chat=ChatOrigin(platform="slack", workspace="T1"),
    )


async def call(pipeline: ToolPipeline, ctx: RunContext, name: str, **tool_input: object) -> str:
    result = await pipeline.execute(ToolUseBlock(id="call-1", name=name, input=tool_input), ctx)
    return result.observation


async def test_an_east_seller_in_a_dm_sees_east_rows_and_is_told(pipeline: ToolPipeline, tmp_path: Path) -> None:
    seen = await call(pipeline, as_person(tmp_path, "U01EAST"), "sql_query", source="dwh", sql="SELECT * FROM orders")
    assert "100" in seen and "200" in seen
    assert "West" not in seen and "7000" not in seen and "@secret" not in seen
    assert "showing rows of orders allowed for east_sales only; customer_email of orders hidden" in seen
    assert "per your access" in seen


async def test_the_same_question_in_a_channel_shows_only_what_default_may_see(
    pipeline: ToolPipeline, tmp_path: Path
) -> None:
    ctx = as_person(tmp_path, "U01EAST", channel="C0GENERAL")
    seen = await call(pipeline, ctx, "sql_query", source="dwh", sql="SELECT region, amount FROM orders")
    assert "East" not in seen and "100" not in seen and "West" not in seen
    assert "no rows of orders are open here" in seen and "everyone here reads the answer" in seen
    configured = as_person(tmp_path, "U02FIN", channel="C0SALES")  # finance asks in the sales channel
    seen = await call(pipeline, configured, "sql_query", source="dwh", sql="SELECT region, amount FROM orders")
    assert "East" in seen and "West" not in seen


async def test_finance_in_a_dm_reads_everything_without_a_note(pipeline: ToolPipeline, tmp_path: Path) -> None:
    seen = await call(pipeline, as_person(tmp_path, "U02FIN"), "sql_query", source="dwh", sql="SELECT * FROM orders")
    assert "West" in seen and "w3@secret.example" in seen
    assert "Access policy" not in seen


async def test_a_source_closed_to_the_audience_is_refused_and_not_listed(
    pipeline: ToolPipeline, tmp_path: Path
) -> None:
    east = as_person(tmp_path, "U01EAST")
    refused = await call(pipeline, east, "sql_query", source="hr", sql="SELECT * FROM orders")
    assert "permission_denied" in refused and "'hr' is not open to you" in refused
    assert "permission_denied" in await call(pipeline, east, "list_tables", source="hr")
    assert "permission_denied" in await call(pipeline, east, "describe_table", table="hr:orders")
    overview = await call(pipeline, east, "list_tables")
    assert "dwh" in overview and "open" in overview and "hr" not in overview
    finance = await call(pipeline, as_person(tmp_path, "U02FIN"), "list_tables")
    assert "hr" in finance


async def test_a_source_the_policy_does_not_name_is_not_governed(pipeline: ToolPipeline, tmp_path: Path) -> None:
    seen = await call(pipeline, as_person(tmp_path, "U9", "C9"), "sql_query", source="open", sql="SELECT * FROM orders")
    assert "West" in seen and "w3@secret.example" in seen and "Access policy" not in seen


async def test_describe_table_shows_only_visible_columns_and_rows(pipeline: ToolPipeline, tmp_path: Path) -> None:
    tool = pipeline.get("describe_table")
    assert tool is not None
    profile = await tool.run(tool.Input(table="dwh:orders"), as_person(tmp_path, "U01EAST"))
    assert [column.name for column in profile.columns] == ["id", "region", "amount"]
    assert profile.row_count == 2
    assert {row[1] for row in profile.sample_rows} == {"East"}
    assert next(c for c in profile.columns if c.name == "amount").max == 200.0
    assert any("allowed for east_sales only" in note for note in profile.notes)
    full = await tool.run(tool.Input(table="dwh:orders"), as_person(tmp_path, "U02FIN"))
    assert [column.name for column in full.columns] == ["id", "region", "customer_email", "amount"]
    assert full.row_count == 3 and not full.notes


def run_cli(tmp_path: Path, sources: dict[str, DataSourceConfig], *args: str) -> subprocess.CompletedProcess[str]:
    policy = tmp_path / "access.yaml"
    env = clean_env(
        tmp_path,
        BA_DATASOURCES=json.dumps({name: cfg.url for name, cfg in sources.items()}),
        BA_ACCESS_POLICY=str(policy),
    )
    query = json.dumps({"source": "dwh", "sql": "SELECT region, count(*) AS n FROM orders GROUP BY region"})
    return subprocess.run(
        [BA_AGENT, "tool", "run", "sql_query", "--json", query, *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )


def test_tool_run_as_a_person_in_a_place(tmp_path: Path, sources: dict[str, DataSourceConfig], policy: AccessPolicy) -> None:
    in_dm = run_cli(tmp_path, sources, "--platform", "slack", "--user", "U01EAST")
    assert in_dm.returncode == 0, in_dm.stderr
    answer = json.loads(in_dm.stdout)
    assert answer["rows"] == [["East", 2]]
    assert "allowed for east_sales only" in answer["access_note"]

    in_channel = run_cli(tmp_path, sources, "--platform", "slack", "--user", "U01EAST", "--channel", "C0GENERAL")
    assert json.loads(in_channel.stdout)["rows"] == []
    in_sales = run_cli(tmp_path, sources, "--platform", "slack", "--user", "U02FIN", "--channel", "C0SALES")
    assert json.loads(in_sales.stdout)["rows"] == [["East", 2]]
    finance = run_cli(tmp_path, sources, "--platform", "slack", "--user", "U02FIN")
    assert sorted(json.loads(finance.stdout)["rows"]) == [["East", 2], ["West", 1]]

    operator = run_cli(tmp_path, sources)  # no identity: only what the default group may see
    assert json.loads(operator.stdout)["rows"] == []
    half = run_cli(tmp_path, sources, "--user", "U01EAST")
    assert half.returncode == 2 and "--platform and --user go together" in half.stderr
