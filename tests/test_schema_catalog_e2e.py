"""A Chinese question about a 500-table PostgreSQL warehouse, asked in Slack: the scripted model
calls `search_schema` (the system prompt tells it to), queries the table it found and answers
with the number the warehouse holds. The real slack-bolt app, the fake Slack and model servers."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.store import CatalogStore, SourceState
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import gateway_settings, running_gateway
from tests.schema_catalog_warehouse import generated_tables, warehouse
from tests.test_sources import _ensure_server, _start_postgres_command
from tests.waiting import Deadline

QUESTION = "上个月各仓库的库存周转天数是多少？"


@pytest.fixture(scope="module")
def warehouse_url() -> Iterator[str]:
    _ensure_server(5432, _start_postgres_command())
    with warehouse(generated_tables(500)) as wh:
        yield wh.url


async def _catalog_states(sessions: async_sessionmaker[AsyncSession]) -> list[SourceState]:
    store = CatalogStore(sessions)
    deadline = Deadline(60)
    while not deadline.passed():
        if states := await store.states():
            return states
        await asyncio.sleep(0.1)
    raise AssertionError("the catalog was not refreshed at start-up")


def _tool_result(request: dict) -> str | None:
    blocks = request["messages"][-1]["content"]
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return None
    content = results[0]["content"]
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


def analyst(request: dict) -> Reply:
    """Plays the model: search_schema, then SQL on the table it names first, then the answer."""
    observation = _tool_result(request)
    if observation is None:
        return Reply([tool_use("search_schema", {"question": QUESTION, "limit": 3}, id="toolu_search")])
    table = re.search(r"catalog_wh_[0-9a-f]{8}\.[a-z_]+", observation)
    if request["messages"][-2]["content"][0]["name"] == "search_schema":
        if table is None:
            return Reply([text(f"search_schema found nothing: {observation[:300]}")])
        sql = f"SELECT AVG(days_of_supply) AS days FROM {table.group(0)}"
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": sql}, id="toolu_sql")])
    days = re.search(r"\d+\.\d+", observation)
    return Reply([text(f"平均库存周转天数为 {float(days.group(0)) if days else 'unknown'} 天。")])


async def test_a_chinese_question_finds_its_table_among_500_and_is_answered(warehouse_url: str, tmp_path: Path) -> None:
    sources = json.dumps({"dwh": {"url": warehouse_url, "allowed_channels": ["C1"]}})
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, BA_DATASOURCES=sources)
        async with running_gateway(settings) as gw:
            # The answering process reads the catalog at start-up, before anyone asks.
            [state] = await _catalog_states(gw.runtime.sessions)
            assert (state.source, state.table_count) == ("dwh", 508)
            await gw.post_event(app_mention(f"<@UBOT> {QUESTION}", "U1", "C1", ts="1700000100.000100"))
            await gw.settled(timeout=90)
        answers = [p["markdown_text"] for p in slack.posted(channel="C1") if "markdown_text" in p]
    assert answers[-1].startswith("平均库存周转天数为 12.5 天。"), answers
    first = anthropic.requests[0].body
    assert "call search_schema with the question first" in json.dumps(first["system"], ensure_ascii=False)
    assert "search_schema" in [tool["name"] for tool in first["tools"]]
    # The search result the model read named the table, its Chinese comments and row count.
    search_result = _tool_result(anthropic.requests[1].body) or ""
    assert "inv_warehouse_stock_snapshot" in search_result and "库存周转天数" in search_result
    assert len(search_result) < 8000  # three tables, not the warehouse


async def _table_count_after_start_up(settings_kwargs: dict, tmp_path: Path, expect: int) -> int:
    """The catalog's table count once the start-up refresh had time to give ``expect``."""
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **settings_kwargs)
        async with running_gateway(settings) as gw:
            await _catalog_states(gw.runtime.sessions)
            deadline = Deadline(5)
            while True:
                [state] = await CatalogStore(gw.runtime.sessions).states()
                if state.table_count == expect or deadline.passed():
                    break
                await asyncio.sleep(0.1)
            return state.table_count


async def test_ba_catalog_refresh_hours_decides_when_a_source_is_read_again(tmp_path: Path) -> None:
    archive = tmp_path / "archive.duckdb"
    with duckdb.connect(str(archive)) as conn:
        conn.execute("CREATE TABLE orders AS SELECT 1 AS id")
    sources = json.dumps({"archive": {"url": f"duckdb:///{archive}", "allowed_channels": ["C1"]}})
    assert await _table_count_after_start_up({"BA_DATASOURCES": sources}, tmp_path, expect=1) == 1
    with duckdb.connect(str(archive)) as conn:
        conn.execute("CREATE TABLE refunds AS SELECT 1 AS id")
    # Read within the last 24 hours: a restart does not read it again…
    assert await _table_count_after_start_up({"BA_DATASOURCES": sources}, tmp_path, expect=2) == 1
    # …while with a period shorter than its age it does, and finds the new table.
    await asyncio.sleep(0.2)
    fresh = {"BA_DATASOURCES": sources, "BA_CATALOG_REFRESH_HOURS": 0.00005}
    assert await _table_count_after_start_up(fresh, tmp_path, expect=2) == 2
