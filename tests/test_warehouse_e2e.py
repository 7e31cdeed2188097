"""A question about the company warehouse, asked in Slack, answered from a `BA_DATASOURCES`
source: the setting reaches the agent that answers chats (not only `tool run`), on PostgreSQL
and MariaDB, through a read-only role, with the source's channel and user allowlists enforced."""

from __future__ import annotations

import json
import re
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

# East has 3 orders of 100.50 each (301.50), West 2 of 40.25 (80.50).
ORDERS = [(1, "East", 100.5), (2, "East", 100.5), (3, "East", 100.5), (4, "West", 40.25), (5, "West", 40.25)]
QUESTION_SQL = "SELECT region, SUM(gmv) AS gmv FROM wh_orders GROUP BY region ORDER BY region"


@pytest.fixture(scope="module")
def pg_warehouse() -> Iterator[str]:
    """A schema with `wh_orders` and a login role that may only read it; yields its URL."""

    def fill(conn: psycopg.Connection, schema: str) -> None:
        conn.execute(f"CREATE TABLE {schema}.wh_orders (id int PRIMARY KEY, region text, gmv numeric(12, 2))")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {schema}.wh_orders VALUES (%s, %s, %s)", ORDERS)

    with postgres_readonly("wh", fill) as (url, _):
        yield url


@pytest.fixture(scope="module")
def mysql_warehouse() -> Iterator[str]:
    """A database with `wh_orders` and a user that may only SELECT from it; yields its URL."""

    def fill(cur: Any, database: str) -> None:
        cur.execute(f"CREATE TABLE {database}.wh_orders (id INT PRIMARY KEY, region VARCHAR(20), gmv DECIMAL(12, 2))")
        cur.executemany(f"INSERT INTO {database}.wh_orders VALUES (%s, %s, %s)", ORDERS)

    with mariadb_readonly("wh", fill) as (url, _):
        yield url


def warehouse_analyst(request: dict) -> Reply:
    """Plays the model: queries the `dwh` source, then answers with what the tool returned."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": QUESTION_SQL}, id="toolu_dwh")])
    content = results[0]["content"]
    body = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    east = re.search(r"East\D+?(\d+(?:\.\d+)?)", body)
    if east is None:
        return Reply([text(f"I could not read the warehouse: {body[:300]}")])
    return Reply([text(f"East GMV is {float(east.group(1)):.2f}.")])


async def ask(settings_extra: dict, tmp_path: Path, database_url: str, channel: str, user: str) -> str:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(warehouse_analyst)
        settings = gateway_settings(database_url, tmp_path, anthropic, slack, **settings_extra)
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> what was GMV in East?", user, channel, ts="1700000100.000100"))
            await gw.settled(timeout=60)
        answers = [p["markdown_text"] for p in slack.posted(channel=channel) if "markdown_text" in p]
        return answers[-1]


@pytest.mark.parametrize("warehouse", ["pg_warehouse", "mysql_warehouse"])
async def test_a_slack_question_is_answered_from_the_configured_warehouse(
    warehouse: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue(warehouse)
    sources = json.dumps({"dwh": {"url": url, "allowed_channels": ["C1"]}})
    answer = await ask({"BA_DATASOURCES": sources}, tmp_path, f"sqlite:///{tmp_path / 'gw.db'}", "C1", "U1")
    assert answer == "East GMV is 301.50."


async def test_a_source_closed_to_the_channel_is_not_queried(pg_warehouse: str, tmp_path: Path) -> None:
    sources = json.dumps({"dwh": {"url": pg_warehouse, "allowed_channels": ["C1"], "allowed_users": ["U1"]}})
    database_url = f"sqlite:///{tmp_path / 'gw.db'}"
    in_other_channel = await ask({"BA_DATASOURCES": sources}, tmp_path / "a", database_url, "C2", "U1")
    assert in_other_channel.startswith("I could not read the warehouse") and "301" not in in_other_channel
    other_user = await ask({"BA_DATASOURCES": sources}, tmp_path / "b", database_url, "C1", "U2")
    assert other_user.startswith("I could not read the warehouse") and "301" not in other_user
