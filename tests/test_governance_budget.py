"""The daily row limit (``BA_USER_DAILY_ROWS``) is a hard limit: rows are reserved in the service
database before a query runs, so calls started together, in one process or in several, never
read more than the limit between them; and every query that reached the database is charged,
failed and timed-out ones included (at least 1 row each). On SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.governance.audit import read_audit
from agent_core.governance.budget import RowBudget
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.deps import ToolDeps
from agent_core.tools.standard import default_tools
from gateway.config import load_settings
from tests.serve_process import BA_AGENT, clean_env
from tests.test_semantic import build_duckdb

LIMIT = 25
ALL_ORDERS = "SELECT id, region FROM orders ORDER BY id"  # 80 rows


@pytest.fixture
def warehouse_url(tmp_path: Path) -> str:
    path = tmp_path / "dwh.duckdb"
    build_duckdb(path)
    return f"duckdb://{path}"


@pytest.fixture
async def audit_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


def person(tmp_path: Path, user: str, call_id: str) -> RunContext:
    return RunContext(
        thread_id="slack:T1:D1:1.1",
        data_dir=tmp_path / "data",
        channel="D1",
        user=user,
        is_dm=True,
        chat=ChatOrigin(platform="slack", workspace="T1"),
        tool_call_id=call_id,
    )


def service_tools(tmp_path: Path, warehouse_url: str, audit_engine: AsyncEngine, limit: int = LIMIT) -> ToolPipeline:
    settings = load_settings(
        _env_file=None, BA_DATA_DIR=str(tmp_path / "data"), BA_DATASOURCES=json.dumps({"dwh": warehouse_url}),
        BA_USER_DAILY_ROWS=str(limit),
    )  # fmt: skip
    return ToolPipeline(default_tools(ToolDeps.of(settings, session_factory(audit_engine))))


def rows_of(observation: str) -> int:
    """Order rows a tool call showed the model (a table row per order), or `tool run` printed."""
    if observation.startswith("{") and '"rows"' in observation:
        return len(json.loads(observation)["rows"])
    return len(re.findall(r"^\| \d+ \|", observation, re.MULTILINE))


async def test_four_calls_started_together_read_at_most_the_limit(
    tmp_path: Path, warehouse_url: str, audit_engine: AsyncEngine
) -> None:
    pipeline = service_tools(tmp_path, warehouse_url, audit_engine)
    calls = [
        pipeline.execute(
            ToolUseBlock(id=f"toolu_{n}", name="sql_query", input={"source": "dwh", "sql": ALL_ORDERS, "max_rows": 20}),
            person(tmp_path, "U1", f"toolu_{n}"),
        )
        for n in range(4)
    ]
    observations = [result.observation for result in await asyncio.gather(*calls)]
    returned = [rows_of(seen) for seen in observations]
    assert sum(returned) <= LIMIT
    assert sum(returned) == LIMIT  # the limit is used, not withheld: 20, then the 5 left
    assert sum("You have used today's 25 rows of warehouse data" in seen for seen in observations) == 2
    sessions = session_factory(audit_engine)
    assert await RowBudget(sessions, LIMIT).used_today("slack", "U1") == LIMIT
    recorded = sorted((e.outcome, e.row_count) for e in await read_audit(sessions))
    assert recorded == [("refused", 0), ("refused", 0), ("succeeded", 5), ("succeeded", 20)]


async def test_processes_started_together_read_at_most_the_limit(
    tmp_path: Path, database_url: str, warehouse_url: str, audit_engine: AsyncEngine
) -> None:
    env = clean_env(
        tmp_path, DATABASE_URL=database_url, BA_DATASOURCES=json.dumps({"dwh": warehouse_url}),
        BA_USER_DAILY_ROWS=str(LIMIT),
    )  # fmt: skip
    query = json.dumps({"source": "dwh", "sql": ALL_ORDERS, "max_rows": 20})

    async def tool_run() -> str:
        process = await asyncio.create_subprocess_exec(
            BA_AGENT, "tool", "run", "sql_query", "--json", query, "--platform", "slack", "--user", "U2",
            env=env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        assert process.returncode in (0, 1), err.decode()
        return out.decode()

    outputs = await asyncio.gather(*(tool_run() for _ in range(3)))
    # An in-process call of the same user on the same service database shares the budget too.
    pipeline = service_tools(tmp_path, warehouse_url, audit_engine)
    here = await pipeline.execute(
        ToolUseBlock(id="toolu_here", name="sql_query", input={"source": "dwh", "sql": ALL_ORDERS, "max_rows": 20}),
        person(tmp_path, "U2", "toolu_here"),
    )
    assert sum(rows_of(out) for out in [*outputs, here.observation]) == LIMIT
    succeeded = [e.row_count for e in await read_audit(session_factory(audit_engine)) if e.outcome == "succeeded"]
    assert sorted(succeeded) == [5, 20]


async def test_a_failed_query_is_charged_and_recorded(
    tmp_path: Path, warehouse_url: str, audit_engine: AsyncEngine
) -> None:
    """An error text can carry a row's values, so a failing probe costs a row like a returned one."""
    pipeline = service_tools(tmp_path, warehouse_url, audit_engine, limit=3)
    probe = "SELECT CAST(region || '|' || CAST(amount AS VARCHAR) AS INTEGER) AS n FROM orders"
    seen = []
    for n in range(4):
        result = await pipeline.execute(
            ToolUseBlock(id=f"toolu_p{n}", name="sql_query", input={"source": "dwh", "sql": probe}),
            person(tmp_path, "U3", f"toolu_p{n}"),
        )
        seen.append(result.observation)
    assert all('"error"' in s for s in seen)
    assert "DAILY_ROW_LIMIT" in seen[3] and "DAILY_ROW_LIMIT" not in seen[2]
    recorded = [(e.tool_call_id, e.outcome) for e in await read_audit(session_factory(audit_engine))]
    assert recorded == [("toolu_p0", "failed"), ("toolu_p1", "failed"), ("toolu_p2", "failed"), ("toolu_p3", "refused")]
