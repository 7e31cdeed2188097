"""Push-down analytics on the local PostgreSQL and MariaDB: `attribute_change` and
`detect_anomalies` over a metric defined in YAML give the same answers as over a file of the
raw rows, from one aggregate query (MariaDB has no GROUPING SETS; the period comparison needs
none)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from agent_core.config import AgentConfig
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace
from agent_core.tools.analytics_tools import (
    AttributeChangeInput,
    AttributeChangeTool,
    DetectAnomaliesInput,
    DetectAnomaliesTool,
)
from tests.test_metrics_e2e import mysql_warehouse, pg_warehouse, semantic_dir  # noqa: F401  (fixtures)
from tests.test_pushdown import assert_only_aggregates_read_tables, same_causes
from tests.test_semantic import ORDERS

JANUARY = {"start": "2026-01-01", "end": "2026-01-31"}
FEBRUARY = {"start": "2026-02-01", "end": "2026-02-28"}
DIALECTS = {"pg": "postgres", "mysql": "mysql"}


def warehouse_config(tmp_path: Path, warehouse: tuple[str, str], kind: str) -> tuple[AgentConfig, RunContext]:
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": warehouse[0]}),
        BA_SEMANTIC_DIR=str(semantic_dir(tmp_path / "semantic", warehouse, kind)),
    )
    return config, RunContext(thread_id="t", data_dir=config.data_dir, channel="C1", user="U1")


async def orders_file(ctx: RunContext) -> str:
    """The raw orders as a workspace CSV: the file-based input the metric answers must match."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ordered_at", "region", "channel", "gmv", "orders"])
    writer.writerows((o[1], o[2], o[3], o[4], 1) for o in ORDERS)
    await conversation_workspace(ctx).write("/data/orders.csv", out.getvalue())
    return "/data/orders.csv"


@pytest.mark.parametrize(("warehouse", "kind"), [("pg_warehouse", "pg"), ("mysql_warehouse", "mysql")])
async def test_attribution_over_a_warehouse_metric_equals_the_file_answer(
    warehouse: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config, ctx = warehouse_config(tmp_path, request.getfixturevalue(warehouse), kind)
    tool = AttributeChangeTool(config)
    data_file = await orders_file(ctx)
    periods = {"baseline_period": JANUARY, "comparison_period": FEBRUARY}
    for metric, form in (
        ("gmv", {"metric_column": "gmv"}),
        ("aov", {"numerator_column": "gmv", "denominator_column": "orders"}),
    ):
        pushed = await tool.run(AttributeChangeInput(metric=metric, dimensions=["region", "channel"], **periods), ctx)
        from_file = await tool.run(
            AttributeChangeInput(
                data_file=data_file,
                time_column="ordered_at",
                metric_name=metric,
                dimensions=["region", "channel"],
                **form,
                **periods,
            ),
            ctx,
        )
        same_causes(pushed, from_file)
        assert pushed.total_actual == pytest.approx(from_file.total_actual)
        computed = pushed.computed_in_source
        assert computed.source == "dwh" and computed.cube_rows == 3 * 2  # region x channel leaves, of 120 orders
        assert_only_aggregates_read_tables(computed.sql, DIALECTS[kind])


@pytest.mark.parametrize(("warehouse", "kind"), [("pg_warehouse", "pg"), ("mysql_warehouse", "mysql")])
async def test_anomalies_of_a_warehouse_metric_equal_the_file_answer(
    warehouse: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    config, ctx = warehouse_config(tmp_path, request.getfixturevalue(warehouse), kind)
    tool = DetectAnomaliesTool(config)
    pushed = await tool.run(DetectAnomaliesInput(metric="gmv", segment_column="region", grain="week"), ctx)
    from_file = await tool.run(
        DetectAnomaliesInput(
            data_file=await orders_file(ctx), time_column="ordered_at", value_column="gmv", segment_column="region"
        ),
        ctx,
    )
    daily = await tool.run(DetectAnomaliesInput(metric="gmv", segment_column="region"), ctx)
    assert [(s.segment, s.n_points) for s in daily.series] == [(s.segment, s.n_points) for s in from_file.series]
    assert [(a.segment, a.timestamp, a.direction) for a in daily.anomalies] == [
        (a.segment, a.timestamp, a.direction) for a in from_file.anomalies
    ]
    assert {s.segment for s in pushed.series} == {"East", "West", "North"}
    assert all(s.frequency == "weekly" for s in pushed.series)
    assert pushed.computed_in_source.cube_rows == sum(s.n_points for s in pushed.series)
    assert_only_aggregates_read_tables(pushed.computed_in_source.sql, DIALECTS[kind])
