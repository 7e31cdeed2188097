"""detect_anomalies and attribute_change through the real tools, on the demo data (its injected
East China / app drop on 2026-10-20..22) and on workspace files; input validation and errors."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agent_core.analytics.anomaly import AnomalyReport
from agent_core.analytics.attribution import AttributionResult
from agent_core.config import AgentConfig
from agent_core.data.conversation import demo_database
from agent_core.data.demo import ensure_demo_database
from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.analytics_tools import (
    AttributeChangeInput,
    AttributeChangeTool,
    DetectAnomaliesInput,
    DetectAnomaliesTool,
)
from agent_core.tools.deps import ToolDeps
from agent_core.tools.standard import default_tools

EAST_APP = "region = 'East China' AND channel = 'app'"
DROP_DAY = datetime(2026, 10, 20)
WEEK_BEFORE = {"start": "2026-10-13", "end": "2026-10-19"}
OUTAGE = {"start": "2026-10-20", "end": "2026-10-22"}


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    ctx = RunContext(thread_id="slack:T1:C1:1700000001.000100", data_dir=tmp_path / "data")
    ensure_demo_database(demo_database(ctx))
    return ctx


async def detect(ctx: RunContext, **args: Any) -> AnomalyReport:
    return await DetectAnomaliesTool().run(DetectAnomaliesInput(**args), ctx)


async def attribute(ctx: RunContext, **args: Any) -> AttributionResult:
    return await AttributeChangeTool().run(AttributeChangeInput(**args), ctx)


async def write_file(ctx: RunContext, path: str, content: str) -> None:
    await conversation_workspace(ctx).write(path, content)


# --- detect_anomalies ------------------------------------------------------------------------


async def test_finds_the_outage_in_the_east_china_app_series(ctx: RunContext) -> None:
    report = await detect(
        ctx,
        sql=f"SELECT date, SUM(orders) AS orders FROM demo.sales WHERE {EAST_APP} GROUP BY date",
        time_column="date",
        value_column="orders",
    )
    drops = [a for a in report.anomalies if a.direction == "drop"]
    assert [a.timestamp for a in drops] == [DROP_DAY]
    assert drops[0].value < 0.75 * drops[0].expected
    assert report.series[0].frequency == "daily" and report.series[0].period == 7


async def test_per_segment_names_the_segment_that_dropped(ctx: RunContext) -> None:
    report = await detect(
        ctx,
        sql="SELECT date, region || ' / ' || channel AS segment, SUM(gmv) AS gmv "
        "FROM demo.sales GROUP BY ALL",
        time_column="date",
        value_column="gmv",
        segment_column="segment",
    )
    assert len(report.series) == 15
    drops = [(a.segment, a.timestamp) for a in report.anomalies if a.direction == "drop"]
    assert drops == [("East China / app", DROP_DAY)]


async def test_holidays_are_not_reported(ctx: RunContext) -> None:
    sql = "SELECT date, SUM(orders) AS orders FROM demo.sales GROUP BY date"
    plain = await detect(ctx, sql=sql, time_column="date", value_column="orders")
    assert datetime(2026, 6, 18) in [a.timestamp for a in plain.anomalies]  # the 618 promotion
    known = await detect(
        ctx, sql=sql, time_column="date", value_column="orders", holidays=["2026-06-18"]
    )
    assert datetime(2026, 6, 18) not in [a.timestamp for a in known.anomalies]


async def test_reads_a_csv_data_file(ctx: RunContext) -> None:
    rows = ["day,visits"] + [
        f"2026-09-{d:02d},{40 if d == 20 else 100 + (d % 7) * 3}" for d in range(1, 31)
    ]
    await write_file(ctx, "/data/visits.csv", "\n".join(rows) + "\n")
    report = await detect(ctx, data_file="/data/visits.csv", time_column="day", value_column="visits")
    assert [(a.timestamp, a.direction) for a in report.anomalies] == [(datetime(2026, 9, 20), "drop")]


async def test_reads_a_json_file_in_the_sql_result_shape(ctx: RunContext) -> None:
    values = [100 + (d % 7) * 3 for d in range(1, 31)]
    values[9] = 400
    payload = {"columns": ["day", "n"], "rows": [[f"2026-09-{d:02d}", v] for d, v in zip(range(1, 31), values, strict=True)]}
    await write_file(ctx, "/data/series.json", json.dumps(payload))
    report = await detect(ctx, data_file="/data/series.json", time_column="day", value_column="n")
    assert [(a.timestamp, a.direction) for a in report.anomalies] == [(datetime(2026, 9, 10), "spike")]


async def test_unknown_column_lists_the_available_ones(ctx: RunContext) -> None:
    with pytest.raises(ToolError) as caught:
        await detect(ctx, sql="SELECT date, orders FROM demo.sales", time_column="day", value_column="orders")
    assert caught.value.error_type is ErrorType.INVALID_PARAMETERS
    assert "day" in str(caught.value) and "date, orders" in str(caught.value)


async def test_files_outside_data_and_uploads_are_refused(ctx: RunContext) -> None:
    await write_file(ctx, "/reports/x.csv", "day,n\n2026-01-01,1\n")
    with pytest.raises(ToolError) as caught:
        await detect(ctx, data_file="/reports/x.csv", time_column="day", value_column="n")
    assert caught.value.error_type is ErrorType.INVALID_PARAMETERS
    with pytest.raises(ToolError) as caught:
        await detect(ctx, data_file="/data/../../etc/passwd", time_column="day", value_column="n")
    assert caught.value.error_type is ErrorType.PERMISSION_DENIED


async def test_unsafe_sql_is_refused_like_sql_query(ctx: RunContext) -> None:
    with pytest.raises(ToolError) as caught:
        await detect(ctx, sql="DROP TABLE demo.sales", time_column="date", value_column="orders")
    assert caught.value.error_type is ErrorType.PERMISSION_DENIED


def test_exactly_one_row_source() -> None:
    with pytest.raises(ValidationError, match="exactly one of `sql` or `data_file`"):
        DetectAnomaliesInput(time_column="d", value_column="v")
    with pytest.raises(ValidationError, match="exactly one of `sql` or `data_file`"):
        DetectAnomaliesInput(sql="SELECT 1", data_file="/data/a.csv", time_column="d", value_column="v")


# --- attribute_change ------------------------------------------------------------------------


async def test_periods_form_names_east_china_app(ctx: RunContext) -> None:
    result = await attribute(
        ctx,
        sql="SELECT date, region, channel, category, gmv FROM demo.sales "
        "WHERE date BETWEEN DATE '2026-10-13' AND DATE '2026-10-22'",
        dimensions=["region", "channel", "category"],
        time_column="date",
        baseline_period=WEEK_BEFORE,
        comparison_period=OUTAGE,
        metric_column="gmv",
        metric_name="GMV",
    )
    top = result.root_causes[0]
    assert top.element == {"region": "East China", "channel": "app"}
    assert top.relative_change is not None and top.relative_change < -0.3
    assert result.explanation.startswith("GMV moved from")
    assert any("rescaled" in note for note in result.notes)  # 7 baseline days vs 3


async def test_leaf_table_form_names_east_china_app(ctx: RunContext) -> None:
    result = await attribute(
        ctx,
        sql="SELECT region, channel, "
        "SUM(orders) FILTER (WHERE date BETWEEN DATE '2026-10-13' AND DATE '2026-10-15') AS before, "
        "SUM(orders) FILTER (WHERE date BETWEEN DATE '2026-10-20' AND DATE '2026-10-22') AS after "
        "FROM demo.sales GROUP BY ALL",
        dimensions=["region", "channel"],
        baseline_column="before",
        actual_column="after",
    )
    assert [rc.element for rc in result.root_causes] == [{"region": "East China", "channel": "app"}]
    assert result.root_causes[0].share > 0.8


async def test_ratio_form_from_a_data_file(ctx: RunContext) -> None:
    # Conversion (orders / sessions) fell only in app: a rate effect of one channel.
    lines = ["channel,region,orders_0,orders_1,sessions_0,sessions_1"]
    for channel in ("app", "web", "offline"):
        for i, region in enumerate(("East", "North", "South", "West", "Central")):
            sessions = 1000 + 100 * i
            rate_0 = 0.05 + 0.002 * i
            rate_1 = rate_0 * (0.6 if channel == "app" else 1.0 + 0.01 * (i - 2))
            lines.append(
                f"{channel},{region},{sessions * rate_0:.0f},{sessions * rate_1:.0f},{sessions},{sessions}"
            )
    await write_file(ctx, "/data/conv.csv", "\n".join(lines))
    result = await attribute(
        ctx,
        data_file="/data/conv.csv",
        dimensions=["channel", "region"],
        numerator_columns=["orders_0", "orders_1"],
        denominator_columns=["sessions_0", "sessions_1"],
    )
    assert result.metric_kind == "ratio"
    assert result.root_causes[0].element == {"channel": "app"}
    assert result.root_causes[0].effect == "rate"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({}, "use exactly one form"),
        ({"baseline_column": "a"}, "give both baseline_column and actual_column"),
        (
            {"baseline_column": "a", "actual_column": "b", "time_column": "d"},
            "use exactly one form",
        ),
        ({"numerator_columns": ["a", "b"]}, "give both numerator_columns and denominator_columns"),
        ({"time_column": "d", "metric_column": "m"}, "give time_column, baseline_period"),
        (
            {"time_column": "d", "baseline_period": WEEK_BEFORE, "comparison_period": OUTAGE},
            "give metric_column, or numerator_column",
        ),
        (
            {
                "time_column": "d",
                "baseline_period": WEEK_BEFORE,
                "comparison_period": OUTAGE,
                "numerator_column": "n",
            },
            "give both numerator_column and denominator_column",
        ),
        (
            {
                "time_column": "d",
                "baseline_period": {"start": "2026-10-19", "end": "2026-10-13"},
                "comparison_period": OUTAGE,
                "metric_column": "m",
            },
            "period end is before its start",
        ),
    ],
)
def test_attribution_forms_are_validated(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        AttributeChangeInput(sql="SELECT 1", dimensions=["region"], **args)


async def test_a_period_without_rows_is_an_invalid_parameter(ctx: RunContext) -> None:
    with pytest.raises(ToolError) as caught:
        await attribute(
            ctx,
            sql="SELECT date, region, gmv FROM demo.sales",
            dimensions=["region"],
            time_column="date",
            baseline_period={"start": "2020-01-01", "end": "2020-01-07"},
            comparison_period=OUTAGE,
            metric_column="gmv",
        )
    assert caught.value.error_type is ErrorType.INVALID_PARAMETERS
    assert "no rows" in str(caught.value)


# --- through the pipeline --------------------------------------------------------------------


async def test_default_tools_include_both_and_the_pipeline_formats_results(ctx: RunContext) -> None:
    tools = default_tools(ToolDeps.of(AgentConfig(model="test-model", data_dir=ctx.data_dir)))
    pipeline = ToolPipeline(tools)
    assert {"detect_anomalies", "attribute_change"} <= set(pipeline.names)
    call = ToolUseBlock(
        id="tu1",
        name="attribute_change",
        input={
            "sql": "SELECT date, region, channel, orders FROM demo.sales",
            "dimensions": ["region", "channel"],
            "time_column": "date",
            "baseline_period": WEEK_BEFORE,
            "comparison_period": OUTAGE,
            "metric_column": "orders",
        },
    )
    result = await pipeline.execute(call, ctx)
    assert not result.is_error, result.observation
    assert "East China" in result.observation


def test_periods_accept_dates() -> None:
    args = AttributeChangeInput(
        sql="SELECT 1",
        dimensions=["r"],
        time_column="d",
        baseline_period={"start": date(2026, 10, 13), "end": date(2026, 10, 19)},
        comparison_period=OUTAGE,
        metric_column="m",
    )
    assert args.baseline_period is not None and args.baseline_period.days == 7
