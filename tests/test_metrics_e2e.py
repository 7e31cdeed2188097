"""Governed metrics over the company warehouse: metrics defined in dbt Semantic Layer YAML
(`BA_SEMANTIC_DIR`) over tables in the local PostgreSQL and MariaDB, read through read-only
roles. A question asked in Slack is answered by a model that calls `query_metric` (after a
wrong metric name, whose error lists the right ones); every metric type returns the same
numbers on PostgreSQL, MariaDB and DuckDB."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agent_core.config import AgentConfig
from agent_core.run_context import RunContext
from agent_core.semantic.catalog import MetricCatalog
from agent_core.toolkit.protocol import ToolError
from agent_core.tools.metric_tools import ListMetricsInput, ListMetricsTool, QueryMetricInput, QueryMetricTool
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import gateway_settings, running_gateway
from tests.readonly_warehouse import mariadb_readonly, postgres_readonly
from tests.test_semantic import CUSTOMERS, ORDERS, WAREHOUSE_YAML, build_duckdb, write_warehouse_yaml

ORDERS_DDL = (
    "CREATE TABLE {t}.orders (id INT PRIMARY KEY, ordered_at DATE, region VARCHAR(20), channel VARCHAR(20), "
    "amount DECIMAL(12, 2), customer_id INT)"
)
CUSTOMERS_DDL = "CREATE TABLE {t}.customers (customer_id INT PRIMARY KEY, segment VARCHAR(20), home_region VARCHAR(20))"
EAST_GMV = sum(o[4] for o in ORDERS if o[2] == "East")


@pytest.fixture(scope="module")
def pg_warehouse() -> Iterator[tuple[str, str]]:
    """Schema `mx_…` with orders and customers, and a role that may only read it: (URL, schema)."""

    def fill(conn: psycopg.Connection, schema: str) -> None:
        conn.execute(ORDERS_DDL.format(t=schema))
        conn.execute(CUSTOMERS_DDL.format(t=schema))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {schema}.orders VALUES (%s, %s, %s, %s, %s, %s)", ORDERS)
            cur.executemany(f"INSERT INTO {schema}.customers VALUES (%s, %s, %s)", CUSTOMERS)

    # No search_path: the semantic model names the schema (node_relation).
    with postgres_readonly("mx", fill, search_path=False) as warehouse:
        yield warehouse


@pytest.fixture(scope="module")
def mysql_warehouse() -> Iterator[tuple[str, str]]:
    """Database `mx_…` with orders and customers, and a user that may only SELECT: (URL, db)."""

    def fill(cur: Any, database: str) -> None:
        cur.execute(ORDERS_DDL.format(t=database))
        cur.execute(CUSTOMERS_DDL.format(t=database))
        cur.executemany(f"INSERT INTO {database}.orders VALUES (%s, %s, %s, %s, %s, %s)", ORDERS)
        cur.executemany(f"INSERT INTO {database}.customers VALUES (%s, %s, %s)", CUSTOMERS)

    with mariadb_readonly("mx", fill) as warehouse:
        yield warehouse


def semantic_dir(root: Path, warehouse: tuple[str, str], kind: str) -> Path:
    """The test warehouse's YAML for source `dwh`: schema-qualified on PostgreSQL (the role has
    no search_path), the URL's database on MariaDB."""
    yaml_text = WAREHOUSE_YAML
    if kind == "pg":
        relation = f"\n    node_relation:\n      schema_name: {warehouse[1]}\n"
        yaml_text = yaml_text.replace("model: ref('orders')\n", f"model: ref('orders'){relation}")
        yaml_text = yaml_text.replace("model: ref('customers')\n", f"model: ref('customers'){relation}")
    return write_warehouse_yaml(root, "dwh", yaml_text)


def metrics_analyst(request: dict) -> Reply:
    """Plays the model: asks for a metric that does not exist, reads the error, asks for GMV by
    region, then answers with East's figure."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Reply([tool_use("query_metric", {"metrics": ["revenue"], "group_by": ["region"]}, id="toolu_m1")])
    body = results[0]["content"]
    body = body if isinstance(body, str) else " ".join(b.get("text", "") for b in body)
    if results[0].get("is_error"):
        assert "Unknown metric(s) revenue" in body and "gmv" in body, body
        return Reply([tool_use("query_metric", {"metrics": ["gmv"], "group_by": ["region"]}, id="toolu_m2")])
    east = re.search(r"East\D+?(\d+(?:\.\d+)?)", body)
    if east is None or "gmv" not in body:
        return Reply([text(f"I could not compute the metric: {body[:300]}")])
    return Reply([text(f"East GMV is {float(east.group(1)):.2f} (metric gmv: sum of order amounts).")])


@pytest.mark.parametrize(("warehouse", "kind"), [("pg_warehouse", "pg"), ("mysql_warehouse", "mysql")])
async def test_a_slack_question_is_answered_from_a_yaml_metric(
    warehouse: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    wh = request.getfixturevalue(warehouse)
    extra = {
        "BA_DATASOURCES": json.dumps({"dwh": {"url": wh[0], "allowed_channels": ["C1"]}}),
        "BA_SEMANTIC_DIR": str(semantic_dir(tmp_path / "semantic", wh, kind)),
    }
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(metrics_analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **extra)
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> what was GMV in East?", "U1", "C1", ts="1700000100.000100"))
            await gw.settled(timeout=60)
        answers = [p["markdown_text"] for p in slack.posted(channel="C1") if "markdown_text" in p]
        tools_offered = {t["name"] for t in anthropic.last_request.body["tools"]}
    assert answers[-1] == f"East GMV is {EAST_GMV:.2f} (metric gmv: sum of order amounts)."
    assert {"list_metrics", "query_metric"} <= tools_offered


QUERIES: list[dict[str, Any]] = [
    {"metrics": ["gmv", "orders", "buyers"], "group_by": ["region"]},
    {"metrics": ["aov", "app_gmv", "app_share"], "group_by": ["channel"], "where": "region IN ('East', 'West')"},
    {"metrics": ["gmv"], "group_by": ["customer__segment", "metric_time__week"]},
    {"metrics": ["gmv_3d", "gmv_mtd"], "group_by": ["metric_time__day"], "start": "2026-02-01", "end": "2026-02-20"},
    {"metrics": ["gmv_mtd", "gmv_3d"], "grain": "month"},
    {"metrics": ["gmv", "gmv_growth"], "grain": "quarter"},
    {"metrics": ["gmv"], "group_by": ["region"], "grain": "year", "order_by": ["-gmv"], "limit": 2},
]


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    def value(v: Any) -> Any:
        if isinstance(v, Decimal | float):
            return round(float(v), 6)
        if isinstance(v, date):
            return v.isoformat()[:10]
        return v

    return [{k: value(v) for k, v in row.items()} for row in rows]


async def run_everywhere(tmp_path: Path, pg: tuple[str, str], mysql: tuple[str, str], query: dict[str, Any]) -> dict[str, Any]:
    results = {}
    duck = tmp_path / "wh.duckdb"
    if not duck.exists():
        build_duckdb(duck)
    for kind, url, wh in (("pg", pg[0], pg), ("mysql", mysql[0], mysql), ("duckdb", f"duckdb://{duck}", None)):
        root = tmp_path / f"semantic_{kind}"
        folder = semantic_dir(root, wh, kind) if wh else write_warehouse_yaml(root, "dwh")
        config = AgentConfig(
            model="m", data_dir=tmp_path / "data", BA_DATASOURCES=json.dumps({"dwh": url}), BA_SEMANTIC_DIR=str(folder)
        )
        ctx = RunContext(thread_id="t", data_dir=config.data_dir, channel="C1", user="U1")
        result = await QueryMetricTool(MetricCatalog(config)).run(QueryMetricInput.model_validate(query), ctx)
        results[kind] = comparable(result.rows)
    return results


@pytest.mark.parametrize("query", QUERIES, ids=[",".join(q["metrics"]) for q in QUERIES])
async def test_every_metric_type_gives_the_same_numbers_on_each_database(
    query: dict[str, Any], pg_warehouse: tuple[str, str], mysql_warehouse: tuple[str, str], tmp_path: Path
) -> None:
    results = await run_everywhere(tmp_path, pg_warehouse, mysql_warehouse, query)
    assert results["pg"] == results["duckdb"]
    assert results["mysql"] == results["duckdb"]
    assert results["duckdb"] and all(set(row) == {*query.get("group_by", []), *query["metrics"]} | (
        {f"metric_time__{query['grain']}"} if "grain" in query else set()) for row in results["duckdb"])  # fmt: skip


async def test_list_metrics_and_a_refused_filter_through_the_tools(pg_warehouse: tuple[str, str], tmp_path: Path) -> None:
    folder = semantic_dir(tmp_path / "semantic", pg_warehouse, "pg")
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": {"url": pg_warehouse[0], "allowed_users": ["U1"]}}),
        BA_SEMANTIC_DIR=str(folder),
    )
    ctx = RunContext(thread_id="t", data_dir=config.data_dir, channel="C1", user="U1")
    listed = await ListMetricsTool(MetricCatalog(config)).run(ListMetricsInput(), ctx)
    gmv = next(m for m in listed if m.name == "gmv")
    assert (gmv.type, gmv.source, gmv.description) == ("simple", "dwh", "Sum of order amounts.")
    assert {"region", "channel", "segment", "metric_time"} <= set(gmv.dimensions)
    with pytest.raises(ToolError) as refused:
        await QueryMetricTool(MetricCatalog(config)).run(QueryMetricInput(metrics=["gmv"], where="1=1; DROP TABLE orders"), ctx)
    assert refused.value.error_type.value == "permission_denied" and "one condition" in str(refused.value)
    stranger = RunContext(thread_id="t", data_dir=config.data_dir, channel="C1", user="U2")
    assert await ListMetricsTool(MetricCatalog(config)).run(ListMetricsInput(source="dwh"), stranger) == []
    with pytest.raises(ToolError, match="Unknown metric"):
        await QueryMetricTool(MetricCatalog(config)).run(QueryMetricInput(metrics=["gmv"], source=None), stranger)
