"""The semantic layer: dbt Semantic Layer YAML read and validated (errors name file and line),
metric queries compiled per metric type and per dialect, and `where` filters that are not plain
conditions over dimensions refused. Numbers are checked by running the compiled SQL on DuckDB
against sums computed in Python; PostgreSQL and MariaDB are in tests/test_metrics_sources.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from agent_core.data.errors import UnsafeSQLError
from agent_core.data.source_config import parse_datasources
from agent_core.data.sql_guard import ensure_read_only
from agent_core.semantic.compiler import compile_metric_query
from agent_core.semantic.errors import MetricQueryError, SemanticModelError, UnsafeFilterError
from agent_core.semantic.loader import load_semantic_layer
from agent_core.semantic.model import SourceSemantics
from agent_core.semantic.query import MetricQuery
from tests.waiting import scaled

ROOT = Path(__file__).resolve().parent.parent

WAREHOUSE_YAML = """\
semantic_models:
  - name: orders
    description: One row per order.
    model: ref('orders')
    defaults:
      agg_time_dimension: ordered_at
    entities:
      - name: order
        type: primary
        expr: id
      - name: customer
        type: foreign
        expr: customer_id
    dimensions:
      - name: ordered_at
        type: time
        type_params:
          time_granularity: day
      - name: region
        type: categorical
      - name: channel
        type: categorical
    measures:
      - name: order_total
        agg: sum
        expr: amount
      - name: order_count
        agg: count
        expr: id
      - name: buyers
        agg: count_distinct
        expr: customer_id
  - name: customers
    model: ref('customers')
    entities:
      - name: customer
        type: primary
        expr: customer_id
    dimensions:
      - name: segment
        type: categorical
      - name: region
        type: categorical
        expr: home_region

metrics:
  - name: gmv
    description: Sum of order amounts.
    type: simple
    type_params:
      measure: order_total
  - name: orders
    description: Number of orders.
    type: simple
    type_params:
      measure: order_count
  - name: buyers
    type: simple
    type_params:
      measure: buyers
  - name: aov
    description: GMV per order.
    type: ratio
    type_params:
      numerator: gmv
      denominator: orders
  - name: app_gmv
    type: simple
    type_params:
      measure: order_total
    filter: "{{ Dimension('order__channel') }} = 'app'"
  - name: app_share
    type: derived
    type_params:
      expr: app_gmv / gmv
      metrics: [app_gmv, gmv]
  - name: gmv_3d
    type: cumulative
    type_params:
      measure: order_total
      cumulative_type_params:
        window: 3 days
  - name: gmv_mtd
    type: cumulative
    type_params:
      measure: order_total
      cumulative_type_params:
        grain_to_date: month
  - name: gmv_growth
    type: derived
    type_params:
      expr: gmv - gmv_prev
      metrics:
        - name: gmv
        - name: gmv
          alias: gmv_prev
          offset_window: 1 month
"""

# (id, ordered_at, region, channel, amount, customer_id)
ORDERS = [
    (i, date(2026, 1, 1) + timedelta(days=(i * 7) % 75), ("East", "West", "North")[i % 3], ("app", "web")[i % 2],
     Decimal(10 + (i * 13) % 90) + Decimal("0.25"), i % 7)
    for i in range(1, 121)
]  # fmt: skip
CUSTOMERS = [(c, ("retail", "business")[c % 2], ("East", "West")[c % 2]) for c in range(7)]


def write_warehouse_yaml(root: Path, source: str, text: str = WAREHOUSE_YAML) -> Path:
    folder = root / source
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "warehouse.yml").write_text(text)
    return root


def build_duckdb(path: Path) -> None:
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE orders (id INTEGER, ordered_at DATE, region VARCHAR, channel VARCHAR, "
            "amount DECIMAL(12, 2), customer_id INTEGER)"
        )
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)", ORDERS)
        conn.execute("CREATE TABLE customers (customer_id INTEGER, segment VARCHAR, home_region VARCHAR)")
        conn.executemany("INSERT INTO customers VALUES (?, ?, ?)", CUSTOMERS)


@pytest.fixture
def warehouse(tmp_path: Path) -> tuple[SourceSemantics, duckdb.DuckDBPyConnection]:
    db = tmp_path / "wh.duckdb"
    build_duckdb(db)
    sources = parse_datasources(json.dumps({"wh": f"duckdb://{db}"}))
    layer = load_semantic_layer(write_warehouse_yaml(tmp_path / "semantic", "wh"), sources)
    conn = duckdb.connect(str(db), read_only=True)
    yield layer.sources["wh"], conn
    conn.close()


def run(semantics: SourceSemantics, conn: duckdb.DuckDBPyConnection, **query: object) -> list[dict]:
    compiled = compile_metric_query(semantics, MetricQuery.model_validate(query))
    cursor = conn.execute(ensure_read_only(compiled.sql, "duckdb"))
    columns = [d[0] for d in cursor.description]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def sums(key, value=lambda o: o[4], rows=ORDERS) -> dict:  # type: ignore[no-untyped-def]
    totals: dict = defaultdict(Decimal)
    for order in rows:
        totals[key(order)] += value(order)
    return dict(totals)


# --- loading ---------------------------------------------------------------------------------


def test_the_bundled_demo_model_loads_without_configuration() -> None:
    layer = load_semantic_layer(None, {})
    demo = layer.sources["demo"]
    assert demo.dialect == "duckdb" and demo.models[0].table.schema == "demo"
    assert {m.type for m in demo.metrics} == {"simple", "ratio", "derived", "cumulative"}


def test_ref_resolves_to_the_table_and_node_relation_schema_qualifies_it(tmp_path: Path) -> None:
    qualified = WAREHOUSE_YAML.replace(
        "    model: ref('orders')\n", "    model: ref('orders')\n    node_relation:\n      schema_name: sales\n"
    )
    sources = parse_datasources(json.dumps({"wh": "postgresql://ro@127.0.0.1/db"}))
    semantics = load_semantic_layer(write_warehouse_yaml(tmp_path, "wh", qualified), sources).sources["wh"]
    assert semantics.dialect == "postgres"
    sql = compile_metric_query(semantics, MetricQuery(metrics=["gmv"], group_by=["customer__segment"])).sql
    assert 'FROM "sales"."orders" AS m' in sql and 'LEFT JOIN "customers" AS m_j1' in sql


def line_of(text: str, needle: str) -> int:
    return text.splitlines().index(needle) + 1


@pytest.mark.parametrize(
    ("old", "new", "needle", "reason"),
    [
        # JSON schema: an aggregation that does not exist, reported at the measure.
        (
            "        agg: sum\n        expr: amount",
            "        agg: summ\n        expr: amount",
            "      - name: order_total",
            "'summ' is not one of",
        ),
        # Semantic validation: a ratio over a metric nobody defined.
        ("      numerator: gmv\n", "      numerator: no_such_metric\n", "  - name: aov", "no_such_metric"),
        # YAML syntax.
        ("    description: One row per order.\n", "    description: [unclosed\n", "    model: ref('orders')", "not valid YAML"),
    ],
)
def test_invalid_yaml_names_the_file_line_and_reason(tmp_path: Path, old: str, new: str, needle: str, reason: str) -> None:
    text = WAREHOUSE_YAML.replace(old, new, 1)
    root = write_warehouse_yaml(tmp_path, "wh", text)
    sources = parse_datasources(json.dumps({"wh": "postgresql://ro@127.0.0.1/db"}))
    with pytest.raises(SemanticModelError) as caught:
        load_semantic_layer(root, sources)
    message = str(caught.value)
    line = line_of(text, needle)
    assert str(root / "wh" / "warehouse.yml") in message and reason in message, message
    assert f"warehouse.yml:{line}:" in message or f"on line #{line}" in message, message


def test_a_folder_that_names_no_data_source_is_refused(tmp_path: Path) -> None:
    root = write_warehouse_yaml(tmp_path, "nowhere")
    with pytest.raises(SemanticModelError, match="no data source is called 'nowhere'"):
        load_semantic_layer(root, {})


def test_invalid_semantic_yaml_stops_start_up_with_exit_code_2(tmp_path: Path) -> None:
    root = write_warehouse_yaml(
        tmp_path / "semantic", "demo", WAREHOUSE_YAML.replace("agg: sum\n        expr: amount", "agg: summ\n        expr: amount")
    )
    env = {"PATH": "/usr/bin:/bin", "BA_DATA_DIR": str(tmp_path / "data"), "BA_SEMANTIC_DIR": str(root)}
    for command in (["metrics", "list"], ["chat"]):
        done = subprocess.run([sys.executable, "-m", "gateway.cli", *command], cwd=tmp_path, env=env,
                              capture_output=True, text=True, input="exit\n", timeout=scaled(120))  # fmt: skip
        assert done.returncode == 2, done.stderr
        line = line_of(WAREHOUSE_YAML, "      - name: order_total")
        assert "BA_SEMANTIC_DIR" in done.stderr and f"warehouse.yml:{line}:" in done.stderr and "summ" in done.stderr
        assert "Traceback" not in done.stderr


# --- compile and run, per metric type --------------------------------------------------------


def test_simple_metrics_by_dimension_and_week(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(semantics, conn, metrics=["gmv", "orders"], group_by=["region"], grain="week")
    expected = sums(lambda o: (o[2], o[1] - timedelta(days=o[1].weekday())))
    assert {(r["region"], r["metric_time__week"]): r["gmv"] for r in rows} == expected
    assert sum(r["orders"] for r in rows) == len(ORDERS)
    assert list(rows[0]) == ["region", "metric_time__week", "gmv", "orders"]


def test_ratio_filtered_simple_and_derived(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    [row] = run(semantics, conn, metrics=["aov", "app_gmv", "app_share"], where="region IN ('East', 'West')")
    chosen = [o for o in ORDERS if o[2] in ("East", "West")]
    total = sum(o[4] for o in chosen)
    app = sum(o[4] for o in chosen if o[3] == "app")
    assert row["aov"] == pytest.approx(float(total) / len(chosen))
    assert row["app_gmv"] == app
    assert float(row["app_share"]) == pytest.approx(float(app / total))


def test_dimensions_of_a_joined_model_do_not_multiply_the_measure(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(semantics, conn, metrics=["gmv", "buyers"], group_by=["customer__segment"])
    segment = {c[0]: c[1] for c in CUSTOMERS}
    assert {r["customer__segment"]: r["gmv"] for r in rows} == sums(lambda o: segment[o[5]])
    assert {r["customer__segment"]: r["buyers"] for r in rows} == {"retail": 4, "business": 3}


def test_cumulative_window_and_grain_to_date(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(
        semantics, conn, metrics=["gmv_3d", "gmv_mtd"], group_by=["metric_time__day"], start="2026-02-01", end="2026-02-28"
    )
    days = sorted({o[1] for o in ORDERS if date(2026, 2, 1) <= o[1] <= date(2026, 2, 28)})
    assert [r["metric_time__day"] for r in rows] == days
    for row in rows:
        day = row["metric_time__day"]
        assert row["gmv_3d"] == sum(o[4] for o in ORDERS if day - timedelta(days=3) < o[1] <= day)
        assert row["gmv_mtd"] == sum(o[4] for o in ORDERS if day.replace(day=1) <= o[1] <= day)
    monthly = run(semantics, conn, metrics=["gmv_mtd"], grain="month")
    # period_agg first: each month shows its first day's month-to-date value.
    firsts = {m: min(o[1] for o in ORDERS if o[1].month == m) for m in (1, 2, 3)}
    assert [r["gmv_mtd"] for r in monthly] == [sums(lambda o: o[1])[firsts[m]] for m in (1, 2, 3)]


def test_derived_metric_with_an_offset_window(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(semantics, conn, metrics=["gmv", "gmv_growth"], grain="month")
    by_month = sums(lambda o: o[1].month)
    assert {r["metric_time__month"].month: r["gmv"] for r in rows if r["gmv"] is not None} == by_month
    growth = {r["metric_time__month"].month: r["gmv_growth"] for r in rows}
    assert growth[2] == by_month[2] - by_month[1] and growth[3] == by_month[3] - by_month[2]


def test_order_by_and_limit(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(semantics, conn, metrics=["gmv"], group_by=["region"], order_by=["-gmv"], limit=1)
    top = max(sums(lambda o: o[2]).items(), key=lambda kv: kv[1])
    assert rows == [{"region": top[0], "gmv": top[1]}]


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_every_metric_compiles_to_sql_the_read_only_guard_accepts(warehouse, dialect: str) -> None:  # type: ignore[no-untyped-def]
    semantics, _ = warehouse
    semantics = SourceSemantics(semantics.source, dialect, semantics.models, semantics.metrics)  # type: ignore[arg-type]
    for metric in semantics.metrics:
        for group_by in ([], ["region", "metric_time__month"], ["customer__segment"]):
            sql = compile_metric_query(
                semantics, MetricQuery(metrics=[metric.name], group_by=group_by, where="channel = 'web'")
            ).sql
            ensure_read_only(sql, dialect)


# --- bad input -------------------------------------------------------------------------------


def test_unknown_metric_and_dimension_errors_name_the_valid_ones(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, _ = warehouse
    with pytest.raises(MetricQueryError) as metric:
        compile_metric_query(semantics, MetricQuery(metrics=["revenue"]))
    assert "Unknown metric 'revenue'" in str(metric.value) and "gmv, orders, buyers, aov" in str(metric.value)
    with pytest.raises(MetricQueryError) as dimension:
        compile_metric_query(semantics, MetricQuery(metrics=["gmv"], group_by=["country"]))
    assert "Unknown dimension 'country'" in str(dimension.value)
    assert str(dimension.value).endswith("available here: metric_time, ordered_at, region, channel, segment, customer__region.")


def test_an_ambiguous_plain_name_asks_for_the_qualified_one(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    # `region` exists on orders and on customers: the order's own wins, customer__region is the other.
    rows = run(semantics, conn, metrics=["gmv"], group_by=["customer__region"])
    home = {c[0]: c[2] for c in CUSTOMERS}
    assert {r["customer__region"]: r["gmv"] for r in rows} == sums(lambda o: home[o[5]])
    assert {r["region"] for r in run(semantics, conn, metrics=["gmv"], group_by=["region"])} == {"East", "West", "North"}


@pytest.mark.parametrize(
    ("where", "reason"),
    [
        ("1=1; DROP TABLE orders", "one condition"),
        ("region = 'East'; DELETE FROM orders", "one condition"),
        ("region IN (SELECT region FROM customers)", "subqueries"),
        ("region = 'East' -- and the rest", "comments"),
        ("region = 'East' /* hidden */ OR 1=1", "comments"),
        ("lower(region) = 'east'", "function LOWER"),
        ("pg_sleep(10) IS NULL", "function PG_SLEEP"),
        ("region = 'East' UNION SELECT 1", "condition"),
        ("orders.region = 'East'", "dimension names"),
        ("region", "condition"),
        ("region = current_user", "not"),
    ],
)
def test_where_filters_that_are_not_plain_conditions_are_refused(warehouse, where: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    semantics, _ = warehouse
    with pytest.raises(UnsafeFilterError) as caught:
        compile_metric_query(semantics, MetricQuery(metrics=["gmv"], where=where))
    assert reason in str(caught.value)


def test_a_where_filter_on_an_unknown_dimension_names_the_valid_ones(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, _ = warehouse
    with pytest.raises(MetricQueryError, match=r"Unknown dimension 'password'.*region"):
        compile_metric_query(semantics, MetricQuery(metrics=["gmv"], where="password = 'x'"))


def test_the_compiled_sql_still_passes_the_guard(warehouse) -> None:  # type: ignore[no-untyped-def]
    semantics, conn = warehouse
    rows = run(semantics, conn, metrics=["gmv"], where="ordered_at >= DATE '2026-03-01' AND NOT channel = 'app'")
    assert rows == [{"gmv": sum(o[4] for o in ORDERS if o[1] >= date(2026, 3, 1) and o[3] != "app")}]
    with pytest.raises(UnsafeSQLError):
        ensure_read_only("SELECT 1; DROP TABLE orders", "duckdb")
