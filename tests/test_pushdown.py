"""Push-down analytics over governed metrics: `attribute_change`, `detect_anomalies` and
`make_chart` take a metric, aggregate it in its database and read back only the aggregated cube.

On the demo metrics (DuckDB) the answers equal those of the same tools over a file of the raw
rows; an access policy on a source still filters rows and hides columns; wrong names are
answered with the valid ones. PostgreSQL and MariaDB are in tests/test_pushdown_sources.py."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlglot
from pydantic import ValidationError
from sqlglot import exp

from agent_core.analytics.anomaly import AnomalyReport
from agent_core.analytics.attribution import AttributionResult
from agent_core.config import AgentConfig
from agent_core.data.demo import demo_database_path, ensure_demo_database
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.approval_gate import ApprovalGate
from agent_core.toolkit.files import conversation_workspace
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.analytics_tools import (
    AttributeChangeInput,
    AttributeChangeTool,
    DetectAnomaliesInput,
    DetectAnomaliesTool,
)
from agent_core.tools.charts import MakeChartTool
from tests.policies import EAST_ONLY_POLICY
from tests.test_semantic import ORDERS, build_duckdb, write_warehouse_yaml

WEEK_BEFORE = {"start": "2026-10-13", "end": "2026-10-19"}
OUTAGE = {"start": "2026-10-20", "end": "2026-10-22"}
DIMENSIONS = ["region", "channel", "category"]


@pytest.fixture
def config(tmp_path: Path) -> AgentConfig:
    config = AgentConfig(model="m", data_dir=tmp_path / "data")
    ensure_demo_database(demo_database_path(config.data_dir))
    return config


@pytest.fixture
def ctx(config: AgentConfig) -> RunContext:
    return RunContext(thread_id="slack:T1:C1:1700000001.000100", data_dir=config.data_dir, channel="C1", user="U1")


async def demo_rows_file(config: AgentConfig, ctx: RunContext) -> str:
    """The demo table's raw rows as a CSV in the workspace: the file-based input."""
    with duckdb.connect(str(demo_database_path(config.data_dir)), read_only=True) as conn:
        cursor = conn.execute("SELECT date, region, channel, category, orders, gmv FROM sales")
        header = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    await conversation_workspace(ctx).write("/data/sales.csv", out.getvalue())
    return "/data/sales.csv"


def assert_only_aggregates_read_tables(sql: str, dialect: str) -> None:
    """Every SELECT that reads a table groups or aggregates: no raw rows can come back."""
    readers = [
        select
        for select in sqlglot.parse_one(sql, read=dialect).find_all(exp.Select)
        if isinstance((select.args.get("from_") or select.args.get("from")).this, exp.Table)
    ]
    assert readers
    for select in readers:
        assert select.args.get("group") or all(e.find(exp.AggFunc) for e in select.expressions), select.sql()


def same_causes(pushed: AttributionResult, from_file: AttributionResult) -> None:
    assert pushed.explanation == from_file.explanation
    assert [c.element for c in pushed.root_causes] == [c.element for c in from_file.root_causes]
    for ours, theirs in zip(pushed.root_causes, from_file.root_causes, strict=True):
        assert ours.contribution == pytest.approx(theirs.contribution, rel=1e-9)
        assert ours.share == pytest.approx(theirs.share, rel=1e-9)


async def test_attributing_a_metric_gives_the_file_answer_from_one_aggregate_query(config: AgentConfig, ctx: RunContext) -> None:
    tool = AttributeChangeTool(config)
    periods = {"baseline_period": WEEK_BEFORE, "comparison_period": OUTAGE}
    pushed = await tool.run(AttributeChangeInput(metric="gmv", dimensions=DIMENSIONS, **periods), ctx)
    data_file = await demo_rows_file(config, ctx)
    from_file = await tool.run(
        AttributeChangeInput(
            data_file=data_file, time_column="date", metric_column="gmv", metric_name="GMV", dimensions=DIMENSIONS, **periods
        ),
        ctx,
    )
    same_causes(pushed, from_file)
    assert pushed.root_causes[0].element == {"region": "East China", "channel": "app"}
    assert "rescaled" in " ".join(pushed.notes)  # 7 baseline days against 3
    computed = pushed.computed_in_source
    assert computed.source == "demo" and computed.metric == "gmv"
    assert computed.cube_rows == 5 * 3 * 5  # one row per leaf, both periods side by side
    assert_only_aggregates_read_tables(computed.sql, "duckdb")


async def test_a_ratio_metric_is_attributed_by_its_numerator_and_denominator(config: AgentConfig, ctx: RunContext) -> None:
    tool = AttributeChangeTool(config)
    periods = {"baseline_period": WEEK_BEFORE, "comparison_period": OUTAGE}
    pushed = await tool.run(AttributeChangeInput(metric="aov", dimensions=["region", "channel"], **periods), ctx)
    from_file = await tool.run(
        AttributeChangeInput(
            data_file=await demo_rows_file(config, ctx),
            time_column="date",
            numerator_column="gmv",
            denominator_column="orders",
            metric_name="Average order value",
            dimensions=["region", "channel"],
            **periods,
        ),
        ctx,
    )
    same_causes(pushed, from_file)
    assert pushed.explanation.startswith("Average order value moved")
    assert pushed.root_causes and pushed.root_causes[0].rate_effect is not None


async def test_anomalies_of_a_metric_equal_those_found_in_the_raw_rows(config: AgentConfig, ctx: RunContext) -> None:
    tool = DetectAnomaliesTool(config)
    pushed = await tool.run(DetectAnomaliesInput(metric="orders", segment_column="region", start="2026-05-01"), ctx)
    from_file = await tool.run(
        DetectAnomaliesInput(
            data_file=await demo_rows_file(config, ctx), time_column="date", value_column="orders", segment_column="region"
        ),
        ctx,
    )
    assert [(a.segment, a.timestamp, a.kind, a.direction) for a in pushed.anomalies] == [
        (a.segment, a.timestamp, a.kind, a.direction) for a in from_file.anomalies
    ]
    assert [a.value for a in pushed.anomalies] == pytest.approx([a.value for a in from_file.anomalies])
    assert any(a.segment == "East China" and a.direction == "drop" for a in pushed.anomalies)
    computed = pushed.computed_in_source
    assert computed.cube_rows == 5 * 184  # one value per region and day, of 13,800 rows
    assert_only_aggregates_read_tables(computed.sql, "duckdb")


async def test_weekly_anomalies_read_one_value_per_week(config: AgentConfig, ctx: RunContext) -> None:
    report = await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="gmv", grain="week", where="channel = 'app'"), ctx)
    assert isinstance(report, AnomalyReport)
    assert report.computed_in_source.cube_rows == 27  # 2026-04-27 .. 2026-10-26 weeks
    assert report.series[0].frequency == "weekly"
    assert "'app'" in report.computed_in_source.sql


async def test_a_chart_of_a_metric_is_drawn_from_the_aggregated_rows(config: AgentConfig, ctx: RunContext) -> None:
    chart = await MakeChartTool(config).run(
        MakeChartTool.Input(
            chart_type="line",
            title="Weekly GMV by region",
            metric_query={"metrics": ["gmv"], "group_by": ["region"], "grain": "week", "end": "2026-06-30"},
            x="metric_time__week",
            y="gmv",
            series="region",
        ),
        ctx,
    )
    assert len(chart.series) == 5 and chart.x_kind == "time" and chart.categories == 10
    assert chart.sql is not None
    assert_only_aggregates_read_tables(chart.sql, "duckdb")
    assert [Path(f.path).suffix for f in ctx.turn.produced_files] == [".png", ".csv"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"metric": "revenue", "dimensions": ["region"]}, ["Unknown metric", "gmv", "aov", "gmv_mtd"]),
        ({"metric": "gmv", "dimensions": ["province"]}, ["Unknown dimension 'province'", "region", "channel", "category"]),
        ({"metric": "gmv_7d", "dimensions": ["region"]}, ["gmv_7d is a cumulative metric", "gmv, orders, aov, app_gmv"]),
        ({"metric": "app_gmv_share", "dimensions": ["region"]}, ["derived metric", "attributed: gmv, orders, aov"]),
    ],
)
async def test_what_cannot_be_attributed_is_answered_with_what_can(
    config: AgentConfig, ctx: RunContext, args: dict[str, Any], named: list[str]
) -> None:
    periods = {"baseline_period": WEEK_BEFORE, "comparison_period": OUTAGE}
    with pytest.raises(ToolError) as refused:
        await AttributeChangeTool(config).run(AttributeChangeInput(**args, **periods), ctx)
    assert refused.value.error_type == ErrorType.INVALID_PARAMETERS
    for text in named:
        assert text in str(refused.value)


async def test_unknown_names_and_unsafe_filters_in_anomalies_and_charts(config: AgentConfig, ctx: RunContext) -> None:
    with pytest.raises(ToolError, match=r"Unknown dimension 'shop'.*region, channel, category"):
        await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="gmv", segment_column="shop"), ctx)
    with pytest.raises(ToolError, match="Unknown metric.*gmv") as unknown:
        await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="sales"), ctx)
    assert unknown.value.error_type == ErrorType.INVALID_PARAMETERS
    with pytest.raises(ToolError, match="one condition") as injected:
        await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="gmv", where="1=1; DROP TABLE sales"), ctx)
    assert injected.value.error_type == ErrorType.PERMISSION_DENIED
    with pytest.raises(ToolError, match="Unknown metric.*gmv"):
        await MakeChartTool(config).run(
            MakeChartTool.Input(chart_type="bar", title="t", metric_query={"metrics": ["sales"]}, x="region", y="sales"), ctx
        )


def test_a_metric_input_excludes_the_row_forms() -> None:
    periods = {"baseline_period": WEEK_BEFORE, "comparison_period": OUTAGE}
    with pytest.raises(ValidationError, match="exactly one of `sql` or `data_file`, or a `metric`"):
        AttributeChangeInput(metric="gmv", sql="SELECT 1", dimensions=["region"], **periods)
    with pytest.raises(ValidationError, match="leave out metric_column"):
        AttributeChangeInput(metric="gmv", metric_column="gmv", dimensions=["region"], **periods)
    with pytest.raises(ValidationError, match="give baseline_period and comparison_period"):
        AttributeChangeInput(metric="gmv", dimensions=["region"])
    with pytest.raises(ValidationError, match="leave out time_column and value_column"):
        DetectAnomaliesInput(metric="gmv", time_column="date", value_column="gmv")
    with pytest.raises(ValidationError, match="give time_column and value_column"):
        DetectAnomaliesInput(sql="SELECT 1")
    with pytest.raises(ValidationError, match="go with `metric`"):
        DetectAnomaliesInput(sql="SELECT 1", time_column="d", value_column="v", grain="week")
    with pytest.raises(ValidationError, match="exactly one of `sql`, `data_file` or `metric_query`"):
        MakeChartTool.Input(chart_type="bar", title="t", sql="SELECT 1", metric_query={"metrics": ["gmv"]}, x="a", y="b")


# --- under an access policy ------------------------------------------------------------------

# The East-only policy, with customer ids hidden and the gmv metric behind an approval.
POLICY = EAST_ONLY_POLICY + """\
        hidden_columns: [customer_id]
metrics:
  gmv: {require_approval: true}
"""


@pytest.fixture
def governed(tmp_path: Path) -> tuple[AgentConfig, RunContext]:
    """Source `dwh` (DuckDB, the test warehouse) whose orders an east seller reads East rows of,
    without customer_id."""
    build_duckdb(tmp_path / "wh.duckdb")
    (tmp_path / "access.yaml").write_text(POLICY)
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": f"duckdb://{tmp_path / 'wh.duckdb'}"}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh")),
        BA_ACCESS_POLICY=str(tmp_path / "access.yaml"),
    )
    ctx = RunContext(
        thread_id="slack:T1:D1:1.1",
        data_dir=config.data_dir,
        channel="D1",
        user="U01EAST",
        is_dm=True,
        chat=ChatOrigin(platform="slack", workspace="T1"),
    )
    return config, ctx


JANUARY = {"start": "2026-01-01", "end": "2026-01-31"}
FEBRUARY = {"start": "2026-02-01", "end": "2026-02-28"}


async def test_filtered_rows_stay_filtered_in_a_pushed_down_attribution(governed: tuple[AgentConfig, RunContext]) -> None:
    config, ctx = governed
    result = await AttributeChangeTool(config).run(
        AttributeChangeInput(metric="gmv", dimensions=["region", "channel"], baseline_period=JANUARY, comparison_period=FEBRUARY),
        ctx,
    )
    east_feb = sum(float(o[4]) for o in ORDERS if o[2] == "East" and o[1].month == 2)
    assert result.total_actual == pytest.approx(east_feb)
    assert all(c.element.get("region", "East") == "East" for c in [*result.root_causes, *result.candidates])
    assert result.computed_in_source.cube_rows == 2  # East x (app, web): no other region's leaf came back
    assert result.computed_in_source.access_note and "east_sales" in result.computed_in_source.access_note


async def test_a_hidden_column_cannot_be_reached_through_a_metric_dimension(governed: tuple[AgentConfig, RunContext]) -> None:
    config, ctx = governed
    # `segment` lives in customers, joined through orders.customer_id, which is hidden here.
    with pytest.raises(ToolError) as refused:
        await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="gmv", segment_column="segment"), ctx)
    assert refused.value.error_type == ErrorType.PERMISSION_DENIED
    assert "customer_id of orders is not available" in str(refused.value) and "retail" not in str(refused.value)
    report = await DetectAnomaliesTool(config).run(DetectAnomaliesInput(metric="orders", segment_column="region"), ctx)
    assert {s.segment for s in report.series} == {"East"}


async def test_a_metric_that_requires_approval_waits_in_every_analytics_tool(
    governed: tuple[AgentConfig, RunContext],
) -> None:
    config, ctx = governed
    tools = ToolPipeline([AttributeChangeTool(config), DetectAnomaliesTool(config), MakeChartTool(config)])
    gate = ApprovalGate(tools, config.access_policy, None)
    calls = {
        "attribute_change": {
            "metric": "gmv",
            "dimensions": ["channel"],
            "baseline_period": JANUARY,
            "comparison_period": FEBRUARY,
        },
        "detect_anomalies": {"metric": "gmv", "grain": "week"},
        "make_chart": {
            "chart_type": "bar",
            "title": "GMV",
            "metric_query": {"metrics": ["gmv"], "group_by": ["channel"]},
            "x": "channel",
            "y": "gmv",
        },
    }
    for name, tool_input in calls.items():
        request = await gate.check(ToolUseBlock(id=f"call-{name}", name=name, input=tool_input), ctx)
        assert request is not None, name
        assert request.reasons == ["the metric 'gmv' requires approval"] and request.source == "dwh"
        assert "GROUP BY" in request.sql and "'East'" in request.sql  # as it would run: aggregated, filtered
    unguarded = {"metric": "orders", "dimensions": ["channel"], "baseline_period": JANUARY, "comparison_period": FEBRUARY}
    assert await gate.check(ToolUseBlock(id="call-orders", name="attribute_change", input=unguarded), ctx) is None
