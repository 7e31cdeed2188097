"""Push-down analytics benchmark: a metric aggregated in PostgreSQL versus its raw rows pulled
into DuckDB first, for `attribute_change` and `detect_anomalies`.

Generates, in a dedicated schema of the local PostgreSQL (dropped at the end), an unlogged fact
table of ``--rows`` sales (default 10M, one year, ``generate_series`` in SQL) with four
dimensions (5 regions x 3 channels x 8 categories x 4 platforms = 480 leaves), an East/app drop
in the comparison week and a 2.5x spike on 2025-11-11, plus a dbt semantic model over it
(metrics revenue, orders, aov). Then, on a warm cache:

- attribution of revenue between two weeks by all four dimensions, and anomaly detection of
  daily revenue per region over the year, through the real tools with ``metric=`` (push-down:
  wall time of the whole call, compile + query + algorithm);
- the same answers from the raw rows: ``COPY`` of the needed columns of the needed rows into
  DuckDB (the conversation's table database), then the same tools with ``sql=`` aggregating
  there (wall time of copy + load + call). The answers are checked to be equal;
- for attribution, the alternative aggregate queries (SQL only): one GROUP BY per period, and
  GROUPING SETS of every 1-3-dimension combination (PostgreSQL only; MySQL/MariaDB has none).

Bytes are measured at the protocol level: the kernel's count of bytes the client socket received
(``TCP_INFO.tcpi_bytes_received``) around each query or COPY, on an instrumented psycopg
connection; the tool's own query is replayed there for its byte count.

    .venv/bin/python bench/pushdown.py [--rows 10000000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import socket
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import duckdb
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_core.config import AgentConfig  # noqa: E402
from agent_core.data.conversation import conversation_database  # noqa: E402
from agent_core.data.demo import demo_database_path, ensure_demo_database  # noqa: E402
from agent_core.run_context import RunContext  # noqa: E402
from agent_core.tools.analytics_tools import (  # noqa: E402
    AttributeChangeInput,
    AttributeChangeTool,
    DetectAnomaliesInput,
    DetectAnomaliesTool,
)

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DIMENSIONS = ["region", "channel", "category", "platform"]
VALUES = {
    "region": ["East", "North", "South", "West", "Central"],
    "channel": ["app", "web", "offline"],
    "category": ["Electronics", "Apparel", "Grocery", "Home", "Beauty", "Toys", "Books", "Sports"],
    "platform": ["ios", "android", "pc", "mini"],
}
BASELINE = (date(2025, 12, 15), date(2025, 12, 21))
COMPARISON = (date(2025, 12, 22), date(2025, 12, 28))
_TCPI_BYTES_RECEIVED = 128  # offset in struct tcp_info (Linux 4.1+)


def generate(conn: psycopg.Connection, schema: str, rows: int) -> None:
    arrays = {d: "ARRAY[" + ", ".join(f"'{v}'" for v in values) + "]" for d, values in VALUES.items()}
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(
        f"CREATE UNLOGGED TABLE {schema}.sales (sold_on date NOT NULL, region text NOT NULL, channel text NOT NULL, "
        "category text NOT NULL, platform text NOT NULL, amount numeric(12, 2) NOT NULL, orders integer NOT NULL)"
    )
    # h: a multiplicative hash of the row number, spread over the dimensions and the amount.
    conn.execute(
        f"""
        INSERT INTO {schema}.sales
        SELECT sold_on, region, channel, category, platform,
               round(base * CASE
                   WHEN sold_on BETWEEN DATE '{COMPARISON[0]}' AND DATE '{COMPARISON[1]}'
                        AND region = 'East' AND channel = 'app' THEN 0.6
                   WHEN sold_on = DATE '2025-11-11' THEN 2.5
                   WHEN extract(isodow FROM sold_on) >= 6 THEN 1.3
                   ELSE 1 END, 2),
               1
        FROM (
            SELECT DATE '2025-01-01' + (i * 365 / {rows})::int AS sold_on,
                   ({arrays["region"]})[1 + h % 5] AS region,
                   ({arrays["channel"]})[1 + h / 5 % 3] AS channel,
                   ({arrays["category"]})[1 + h / 15 % 8] AS category,
                   ({arrays["platform"]})[1 + h / 120 % 4] AS platform,
                   (10 + h / 480 % 190)::numeric AS base
            FROM generate_series(0::bigint, {rows - 1}) AS i,
                 LATERAL (SELECT i * 2654435761 % 4294967296 AS h) AS hashed
        ) AS generated
        """
    )
    conn.execute(f"ANALYZE {schema}.sales")


def semantic_yaml(schema: str) -> str:
    dimensions = "\n".join(f"      - {{name: {d}, type: categorical}}" for d in DIMENSIONS)
    return f"""\
semantic_models:
  - name: sales
    model: ref('sales')
    node_relation: {{schema_name: {schema}}}
    defaults: {{agg_time_dimension: sold_on}}
    primary_entity: sale
    dimensions:
      - {{name: sold_on, type: time, type_params: {{time_granularity: day}}}}
{dimensions}
    measures:
      - {{name: revenue, agg: sum, expr: amount}}
      - {{name: orders, agg: sum}}
metrics:
  - {{name: revenue, type: simple, type_params: {{measure: revenue}}}}
  - {{name: orders, type: simple, type_params: {{measure: orders}}}}
  - {{name: aov, type: ratio, type_params: {{numerator: revenue, denominator: orders}}}}
"""


def received(conn: psycopg.Connection) -> int:
    """Bytes this connection's socket has received so far (every protocol message)."""
    sock = socket.fromfd(conn.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM)
    try:
        return int(struct.unpack_from("Q", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), _TCPI_BYTES_RECEIVED)[0])
    finally:
        sock.close()


def query_cost(conn: psycopg.Connection, sqls: list[str]) -> tuple[float, int, int]:
    """(seconds, bytes received, rows) of running ``sqls`` and fetching every row."""
    before, started, rows = received(conn), time.perf_counter(), 0
    for sql in sqls:
        rows += len(conn.execute(sql).fetchall())
    return time.perf_counter() - started, received(conn) - before, rows


def pull(conn: psycopg.Connection, select: str, table: str, database: Path, csv_path: Path) -> tuple[float, int, int]:
    """COPY ``select`` out of PostgreSQL into DuckDB table ``table``: (seconds, bytes, rows)."""
    before, started = received(conn), time.perf_counter()
    with csv_path.open("wb") as out, conn.cursor().copy(f"COPY ({select}) TO STDOUT (FORMAT csv, HEADER)") as copy:
        for chunk in copy:
            out.write(chunk)
    copied = received(conn) - before
    database.parent.mkdir(parents=True, exist_ok=True)
    with duckdb.connect(str(database)) as duck:
        duck.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM read_csv('{csv_path}', header = true)")
        count = duck.execute(f"SELECT count(*) FROM {table}").fetchone()
    return time.perf_counter() - started, copied, int(count[0]) if count else 0


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = asyncio.run(call())
    return time.perf_counter() - started, result


def grouping_sets_sql(schema: str) -> str:
    sets = [c for k in (1, 2, 3, 4) for c in itertools.combinations(DIMENSIONS, k)]
    grouping = ", ".join("(" + ", ".join(s) + ")" for s in sets)
    return (
        f"SELECT period, {', '.join(DIMENSIONS)}, SUM(amount) AS revenue FROM {schema}.sales, "
        f"LATERAL (SELECT sold_on > DATE '{BASELINE[1]}' AS period) AS p "
        f"WHERE sold_on BETWEEN DATE '{BASELINE[0]}' AND DATE '{COMPARISON[1]}' GROUP BY period, GROUPING SETS ({grouping})"
    )


def per_period_sql(schema: str) -> list[str]:
    return [
        f"SELECT {', '.join(DIMENSIONS)}, SUM(amount) AS revenue FROM {schema}.sales "
        f"WHERE sold_on BETWEEN DATE '{start}' AND DATE '{end}' GROUP BY {', '.join(DIMENSIONS)}"
        for start, end in (BASELINE, COMPARISON)
    ]


def run(rows: int, tmp: Path) -> list[tuple[str, float, int, int]]:
    schema = f"bench_pushdown_{uuid.uuid4().hex[:8]}"
    table: list[tuple[str, float, int, int]] = []
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        try:
            started = time.perf_counter()
            generate(conn, schema, rows)
            print(f"generated {rows:,} rows in {time.perf_counter() - started:.1f} s", flush=True)
            conn.execute(f"SELECT count(*) FROM {schema}.sales").fetchone()  # warm the cache for every path
            folder = tmp / "semantic" / "bench"
            folder.mkdir(parents=True)
            (folder / "sales.yml").write_text(semantic_yaml(schema))
            config = AgentConfig(
                model="m",
                data_dir=tmp / "data",
                BA_DATASOURCES=json.dumps({"bench": PG_URL}),
                BA_SEMANTIC_DIR=str(tmp / "semantic"),
            )
            ctx = RunContext(thread_id="bench", data_dir=config.data_dir, channel="C1", user="U1")
            ensure_demo_database(demo_database_path(config.data_dir))  # the DuckDB tools attach it
            periods = {
                "baseline_period": {"start": BASELINE[0], "end": BASELINE[1]},
                "comparison_period": {"start": COMPARISON[0], "end": COMPARISON[1]},
            }

            # attribution
            attribute = AttributeChangeTool(config)
            detect = DetectAnomaliesTool(config)
            # First calls load pandas, the analytics core and the semantic layer: not measured.
            week = periods["baseline_period"]
            warm_up = AttributeChangeInput(metric="orders", dimensions=["region"], baseline_period=week, comparison_period=week)
            timed(lambda: attribute.run(warm_up, ctx))
            wall, pushed = timed(
                lambda: attribute.run(AttributeChangeInput(metric="revenue", dimensions=DIMENSIONS, **periods), ctx)
            )
            replay = query_cost(conn, [pushed.computed_in_source.sql])
            table.append(("attribution: push-down, tool call (1 query, periods side by side)", wall, *replay[1:]))
            table.append(("attribution: push-down, its query alone (SQL only)", *replay))
            table.append(("attribution: 1 GROUP BY per period (SQL only)", *query_cost(conn, per_period_sql(schema))))
            table.append(("attribution: GROUPING SETS 1-4 dims (SQL only, PG)", *query_cost(conn, [grouping_sets_sql(schema)])))
            select = (
                f"SELECT sold_on, {', '.join(DIMENSIONS)}, amount FROM {schema}.sales "
                f"WHERE sold_on BETWEEN DATE '{BASELINE[0]}' AND DATE '{COMPARISON[1]}'"
            )
            copy_s, copied, raw = pull(conn, select, "raw_weeks", conversation_database(ctx), tmp / "weeks.csv")
            aggregate = f"SELECT sold_on, {', '.join(DIMENSIONS)}, SUM(amount) AS revenue FROM raw_weeks GROUP BY ALL"
            wall, pulled = timed(
                lambda: attribute.run(
                    AttributeChangeInput(
                        sql=aggregate,
                        time_column="sold_on",
                        metric_column="revenue",
                        metric_name="revenue",
                        dimensions=DIMENSIONS,
                        **periods,
                    ),
                    ctx,
                )
            )
            table.append((f"attribution: pull rows -> DuckDB (copy {copy_s:.1f} s) -> tool", copy_s + wall, copied, raw))
            same = [c.element for c in pulled.root_causes] == [c.element for c in pushed.root_causes]
            print(f"attribution: same root causes both ways: {same}; {pushed.explanation[:160]}…", flush=True)

            # anomalies
            wall, found = timed(lambda: detect.run(DetectAnomaliesInput(metric="revenue", segment_column="region"), ctx))
            replay = query_cost(conn, [found.computed_in_source.sql])
            table.append(("anomalies: push-down, tool call (1 GROUP BY day, region)", wall, *replay[1:]))
            table.append(("anomalies: push-down, its query alone (SQL only)", *replay))
            select = f"SELECT sold_on, region, amount FROM {schema}.sales"
            copy_s, copied, raw = pull(conn, select, "raw_year", conversation_database(ctx), tmp / "year.csv")
            wall, from_rows = timed(
                lambda: detect.run(
                    DetectAnomaliesInput(
                        sql="SELECT sold_on, region, SUM(amount) AS revenue FROM raw_year GROUP BY ALL",
                        time_column="sold_on",
                        value_column="revenue",
                        segment_column="region",
                    ),
                    ctx,
                )
            )
            table.append((f"anomalies: pull rows -> DuckDB (copy {copy_s:.1f} s) -> tool", copy_s + wall, copied, raw))
            events = sorted({(a.segment, a.timestamp.date().isoformat()) for a in found.anomalies})
            same = events == sorted({(a.segment, a.timestamp.date().isoformat()) for a in from_rows.anomalies})
            print(f"anomalies: same episodes both ways: {same}; {len(events)} found, e.g. {events[:3]}", flush=True)
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="fact rows to generate")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        table = run(args.rows, Path(tmp))
    print()
    print(f"{'case':<72} {'wall s':>8} {'bytes received':>16} {'rows back':>10}")
    for case, seconds, sent, rows in table:
        print(f"{case:<72} {seconds:>8.2f} {sent:>16,} {rows:>10,}")


if __name__ == "__main__":
    main()
