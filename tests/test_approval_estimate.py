"""`BA_APPROVAL_ROWS` against the engine's own EXPLAIN estimate, on PostgreSQL and MariaDB: a
question whose query would scan a big table waits for approval in the thread, with the estimate
shown; the same question over a small table is answered at once. Through the real gateway on
Slack, the warehouse read through a read-only role."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import gateway_settings, running_gateway
from tests.readonly_warehouse import mariadb_readonly, postgres_readonly

BIG_ROWS, SMALL_ROWS, LIMIT = 20_000, 5, 1_000
CHANNEL = "C1"
BIG_TS, SMALL_TS = "1700000200.000100", "1700000300.000100"


def _rows(count: int) -> list[tuple[int, str, int]]:
    return [(i, "East" if i % 2 else "West", 1) for i in range(count)]


@pytest.fixture(scope="module")
def pg_warehouse() -> Iterator[str]:
    """`big_orders` and `small_orders`, analyzed, readable by a read-only role; yields its URL."""

    def fill(conn: psycopg.Connection, schema: str) -> None:
        for table, count in (("big_orders", BIG_ROWS), ("small_orders", SMALL_ROWS)):
            conn.execute(f"CREATE TABLE {schema}.{table} (id int PRIMARY KEY, region text, amount int)")
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {schema}.{table} VALUES (%s, %s, %s)", _rows(count))
            conn.execute(f"ANALYZE {schema}.{table}")  # the planner's statistics, as a live table has

    with postgres_readonly("est", fill) as (url, _):
        yield url


@pytest.fixture(scope="module")
def mysql_warehouse() -> Iterator[str]:
    """The same tables in a MariaDB database, with a SELECT-only user; yields its URL."""

    def fill(cur: Any, database: str) -> None:
        for table, count in (("big_orders", BIG_ROWS), ("small_orders", SMALL_ROWS)):
            cur.execute(f"CREATE TABLE {database}.{table} (id INT PRIMARY KEY, region VARCHAR(20), amount INT)")
            cur.executemany(f"INSERT INTO {database}.{table} VALUES (%s, %s, %s)", _rows(count))
            cur.execute(f"ANALYZE TABLE {database}.{table}")
            cur.fetchall()

    with mariadb_readonly("est", fill) as (url, _):
        yield url


def analyst(request: dict) -> Reply:
    """Plays the model: sums `amount` by region over the table the question names."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        table = "big_orders" if "big orders" in json.dumps(request["messages"][0]) else "small_orders"
        sql = f"SELECT region, SUM(amount) AS total FROM {table} GROUP BY region ORDER BY region"
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": sql}, id=f"toolu_{table}")])
    content = results[0]["content"]
    body = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    return Reply([text("Totals for East and West." if "East" in body and "West" in body else f"Unexpected: {body[:300]}")])


def thread_posts(slack: FakeSlack, ts: str) -> tuple[list[str], list[str]]:
    """(the model's answers, approval requests) posted in the thread of ``ts``."""
    posts = slack.posted(channel=CHANNEL, thread_ts=ts)
    shown = [p.get("markdown_text") or p.get("text") or "" for p in posts]
    answers = [t for t in shown if t.startswith(("Totals", "Unexpected"))]
    requests = [json.dumps(p["blocks"]) for p in posts if "*Approval needed*" in json.dumps(p.get("blocks", []))]
    return answers, requests


@pytest.mark.parametrize("warehouse", ["pg_warehouse", "mysql_warehouse"])
async def test_a_big_scan_waits_for_approval_and_a_small_one_runs(
    warehouse: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(warehouse)
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack,
            BA_DATASOURCES=json.dumps({"dwh": {"url": url}}), BA_APPROVAL_ROWS=LIMIT,
        )  # fmt: skip
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> totals of the big orders?", "U1", CHANNEL, ts=BIG_TS))
            await gw.post_event(app_mention("<@UBOT> totals of the small orders?", "U1", CHANNEL, ts=SMALL_TS))
            await gw.settled(timeout=60)

            answers, [asked] = thread_posts(slack, BIG_TS)
            assert len(slack.posted(channel=CHANNEL, thread_ts=BIG_TS)) == 1  # the request, no answer
            assert "big_orders" in asked and f"over the {LIMIT:,}-row limit" in asked
            estimate = int(asked.split("*Estimated scan:* ~")[1].split(" rows")[0].replace(",", ""))
            assert estimate > LIMIT  # the planner's figure, shown to the approvers

            answers, asked_small = thread_posts(slack, SMALL_TS)
            assert asked_small == []
            assert answers == ["Totals for East and West."]
