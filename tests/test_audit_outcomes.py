"""Every attempt on a configured source is in the audit trail with its outcome -- succeeded,
failed, timed out, refused -- through `ba-agent tool run … --platform slack --user …`, and
`ba-agent audit` shows and filters by it. Push-down tools are recorded under their own names.
On PostgreSQL no session can declare the retention cut-off for itself."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.governance.audit import AuditTrail, DataAccess, read_audit
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.deps import ToolDeps
from agent_core.tools.standard import default_tools
from gateway.config import load_settings
from gateway.migrate import upgrade
from tests.conftest import _drop_schema, _new_schema
from tests.policies import EAST_ONLY_POLICY
from tests.serve_process import BA_AGENT, clean_env
from tests.test_semantic import build_duckdb, write_warehouse_yaml
from tests.waiting import scaled

# Far slower than a 0.2 s statement timeout on DuckDB (40^7 combinations of the East rows).
SLOW = (
    "SELECT count(*) AS n FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g "
    "WHERE a.amount + g.amount > 0"
)
PROBE = "SELECT CAST(region || '|' || CAST(amount AS VARCHAR) AS INTEGER) AS n FROM orders"


@pytest.fixture
def governed_env(tmp_path: Path) -> dict[str, str]:
    warehouse = tmp_path / "dwh.duckdb"
    build_duckdb(warehouse)
    (tmp_path / "access.yaml").write_text(EAST_ONLY_POLICY)
    return {
        "BA_DATASOURCES": json.dumps({"dwh": {"url": f"duckdb://{warehouse}", "statement_timeout_s": 0.2}}),
        "BA_ACCESS_POLICY": str(tmp_path / "access.yaml"),
        "BA_SEMANTIC_DIR": str(write_warehouse_yaml(tmp_path / "semantic", "dwh")),
    }


def ba_agent(tmp_path: Path, database_url: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BA_AGENT, *args], env=clean_env(tmp_path, DATABASE_URL=database_url, **env),
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip


def run_as(tmp_path: Path, database_url: str, env: dict[str, str], user: str, sql: str) -> subprocess.CompletedProcess[str]:
    query = json.dumps({"source": "dwh", "sql": sql})
    as_user = ("--platform", "slack", "--user", user)
    return ba_agent(tmp_path, database_url, env, "tool", "run", "sql_query", "--json", query, *as_user)


async def test_every_attempt_is_recorded_with_its_outcome_and_ba_agent_audit_filters_by_it(
    tmp_path: Path, database_url: str, governed_env: dict[str, str]
) -> None:
    ok = run_as(tmp_path, database_url, governed_env, "U01EAST", "SELECT count(*) AS n FROM orders")
    assert ok.returncode == 0 and json.loads(ok.stdout)["rows"] == [[40]], ok.stderr
    failed = run_as(tmp_path, database_url, governed_env, "U01EAST", PROBE)
    timed_out = run_as(tmp_path, database_url, governed_env, "U01EAST", SLOW)
    closed = run_as(tmp_path, database_url, governed_env, "U0OTHER", "SELECT count(*) AS n FROM orders")
    unsafe = run_as(tmp_path, database_url, governed_env, "U01EAST", "DELETE FROM orders")
    assert [r.returncode for r in (failed, timed_out, closed, unsafe)] == [1, 1, 1, 1]
    assert "timeout" in timed_out.stdout and "not open to you" in closed.stdout

    shown = ba_agent(tmp_path, database_url, {}, "audit")
    assert shown.returncode == 0, shown.stderr
    heads = [line for line in shown.stdout.splitlines() if not line.startswith("    ")]
    assert [line.split()[2] for line in heads] == ["succeeded", "failed", "timed_out", "refused", "refused"]
    assert "failed (QueryFailed)" in heads[1] and "timed_out (QueryTimeout)" in heads[2]
    assert "slack:U0OTHER" in heads[3] and "refused (AccessDenied)" in heads[3]
    assert "refused (UnsafeSQLError)" in heads[4]
    # What ran is what is recorded: the probe as the policy rewrote it.
    assert "region = 'East'" in shown.stdout.split(heads[1])[1].split(heads[2])[0]

    only_failed = ba_agent(tmp_path, database_url, {}, "audit", "--outcome", "failed").stdout
    assert "CAST(region" in only_failed and "count(*)" not in only_failed
    refused = ba_agent(tmp_path, database_url, {}, "audit", "--outcome", "refused", "--user", "slack:U0OTHER").stdout
    assert "U0OTHER" in refused and "U01EAST" not in refused
    bad = ba_agent(tmp_path, database_url, {}, "audit", "--outcome", "lost")
    assert bad.returncode == 2 and "succeeded" in bad.stderr


@pytest.fixture
async def audit_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


async def test_push_down_tools_are_recorded_under_their_own_names(
    tmp_path: Path, audit_engine: AsyncEngine, governed_env: dict[str, str]
) -> None:
    settings = load_settings(_env_file=None, BA_DATA_DIR=str(tmp_path / "data"), **governed_env)
    pipeline = ToolPipeline(default_tools(ToolDeps.of(settings, session_factory(audit_engine))))
    ctx = RunContext(
        thread_id="slack:T1:D1:1.1", data_dir=tmp_path / "data", channel="D1", user="U01EAST", is_dm=True,
        chat=ChatOrigin(platform="slack", workspace="T1"), tool_call_id="toolu_chart",
    )  # fmt: skip
    chart = {
        "chart_type": "bar", "title": "GMV", "x": "channel", "y": "gmv",
        "metric_query": {"metrics": ["gmv"], "group_by": ["channel"], "source": "dwh"},
    }  # fmt: skip
    result = await pipeline.execute(ToolUseBlock(id="toolu_chart", name="make_chart", input=chart), ctx)
    assert not result.is_error, result.observation
    [record] = await read_audit(session_factory(audit_engine))
    assert (record.tool, record.outcome, record.tool_call_id) == ("make_chart", "succeeded", "toolu_chart")
    assert "region = 'East'" in record.sql


# --- retention on PostgreSQL --------------------------------------------------------------------


@pytest.fixture
def pg_service(postgres_available: str) -> Iterator[str]:
    """A migrated service database on PostgreSQL (this attack has no SQLite counterpart)."""
    schema, url = _new_schema(postgres_available)
    try:
        upgrade(url)
        yield url
    finally:
        _drop_schema(postgres_available, schema)


def recorded(user: str) -> DataAccess:
    return DataAccess(
        platform="slack", user_id=user, channel="D1", source="dwh", tool="sql_query", sql="SELECT 1",
        row_count=1, duration_ms=1.0, thread_id="t1", tool_call_id=f"toolu_{user}",
    )  # fmt: skip


async def test_no_session_can_declare_the_retention_cut_off(pg_service: str) -> None:
    engine = create_engine(pg_service)
    try:
        sessions = session_factory(engine)
        now = datetime.now(UTC)
        async with engine.connect() as conn:
            schema = (await conn.execute(text("SELECT current_schema()"))).scalar_one()
        await AuditTrail(sessions, clock=lambda: now - timedelta(days=400)).record(recorded("OLD"))
        await AuditTrail(sessions).record(recorded("RECENT"))
        attacks = (
            "DO $$BEGIN PERFORM set_config('ba_agent.audit_prune_before','2999-01-01',true); "
            "DELETE FROM data_access_audit; END$$",
            # A look-alike retention table earlier on the search path is not the one consulted.
            "CREATE TEMP TABLE data_access_audit_retention (id int, days int); "
            "INSERT INTO data_access_audit_retention VALUES (1, 1); "
            f'SET LOCAL search_path = pg_temp, "{schema}"; DELETE FROM data_access_audit',
        )
        for attack in attacks:
            with pytest.raises(DBAPIError, match="append-only"):
                async with engine.begin() as conn:
                    await conn.execute(text(attack))
        assert {e.user_id for e in await read_audit(sessions)} == {"OLD", "RECENT"}
        # Rows past the retention (365 days unless configured) may go; younger ones may not.
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM data_access_audit WHERE user_id = 'OLD'"))
        assert [e.user_id for e in await read_audit(sessions)] == ["RECENT"]
    finally:
        await engine.dispose()



async def test_a_source_closed_here_is_a_recorded_refusal_for_every_tool(
    tmp_path: Path, audit_engine: AsyncEngine, governed_env: dict[str, str]
) -> None:
    source = {**json.loads(governed_env["BA_DATASOURCES"])["dwh"], "allowed_channels": ["C0SALES"]}
    env = {**governed_env, "BA_DATASOURCES": json.dumps({"dwh": source})}
    settings = load_settings(_env_file=None, BA_DATA_DIR=str(tmp_path / "data"), **env)
    pipeline = ToolPipeline(default_tools(ToolDeps.of(settings, session_factory(audit_engine))))

    async def call(user: str, channel: str, name: str, **tool_input: object) -> str:
        ctx = RunContext(thread_id="slack:T1:x:1.1", data_dir=tmp_path / "data", channel=channel, user=user,
                         is_dm=channel.startswith("D"), chat=ChatOrigin(platform="slack", workspace="T1"))  # fmt: skip
        return (await pipeline.execute(ToolUseBlock(id=f"toolu_{name}_{user}", name=name, input=tool_input), ctx)).observation

    # U0OTHER is in no group of the policy; the source's allowlist opens it in C0SALES only.
    assert "not open to" in await call("U0OTHER", "C0SALES", "describe_table", table="dwh:orders")
    assert "not available" in await call("U01EAST", "D1", "sql_query", source="dwh", sql="SELECT 1 AS one FROM orders")
    recorded = [(e.tool, e.user_id, e.outcome, e.error) for e in await read_audit(session_factory(audit_engine))]
    assert recorded == [
        ("describe_table", "U0OTHER", "refused", "AccessDenied"),
        ("sql_query", "U01EAST", "refused", "DataSourceNotAllowed"),
    ]
