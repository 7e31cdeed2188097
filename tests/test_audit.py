"""The data-access audit trail: every query on a configured source is recorded as it ran (after
the access-policy rewrite) with who asked, where, and the tool call; a failed record withholds
the data; `ba-agent audit` reads it back; retention prunes it; the table refuses changes; and
the per-user daily row limit is computed from it. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.config import AgentConfig
from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.access import SourceAccess
from agent_core.governance.audit import AuditTrail, DataAccess, read_audit
from agent_core.governance.audit_table import create_audit_table
from agent_core.governance.budget import RowBudget
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.schedules.store import ScheduleStore
from agent_core.semantic.catalog import MetricCatalog
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.data_tools import DescribeTableTool
from agent_core.tools.deps import ToolDeps
from agent_core.tools.metric_tools import QueryMetricTool
from agent_core.tools.sql import SqlQueryTool
from agent_core.tools.standard import default_tools
from gateway.config import load_settings
from gateway.jobs.scheduler import Scheduler
from gateway.service.inbox import Inbox
from gateway.service.runtime import scheduler_config
from tests.policies import sales_policy
from tests.serve_process import BA_AGENT, clean_env
from tests.test_semantic import build_duckdb, write_warehouse_yaml
from tests.waiting import scaled

POLICY = sales_policy(channels={"slack:C0SALES": "east_sales"})
EAST_ONLY = "region = 'East'"


@pytest.fixture
def warehouse(tmp_path: Path) -> DataSourceConfig:
    """The semantic tests' orders (40 per region) and customers, as a DuckDB source."""
    path = tmp_path / "dwh.duckdb"
    build_duckdb(path)
    return DataSourceConfig(name="dwh", url=f"duckdb://{path}")


@pytest.fixture
def policy(tmp_path: Path) -> AccessPolicy:
    path = tmp_path / "access.yaml"
    path.write_text(POLICY)
    return load_policy(path, {"dwh": "duckdb"})


@pytest.fixture
async def audit_engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(database_url)
    yield engine
    await engine.dispose()


def as_person(tmp_path: Path, user: str, channel: str | None = None) -> RunContext:
    return RunContext(
        thread_id=f"slack:T1:{channel or 'D1'}:1.1",
        data_dir=tmp_path / "data",
        channel=channel or "D1",
        user=user,
        is_dm=channel is None,
        chat=ChatOrigin(platform="slack", workspace="T1"),
    )


async def call(pipeline: ToolPipeline, ctx: RunContext, call_id: str, name: str, **tool_input: object) -> str:
    result = await pipeline.execute(ToolUseBlock(id=call_id, name=name, input=tool_input), ctx)
    return result.observation


def sql_tools(warehouse: DataSourceConfig, policy: AccessPolicy, audit: AuditTrail) -> ToolPipeline:
    sources = {"dwh": warehouse}
    return ToolPipeline(
        [SqlQueryTool(sources, access_policy=policy, audit=audit), DescribeTableTool(sources, access_policy=policy, audit=audit)]
    )


async def test_sql_query_records_the_sql_as_rewritten_and_who_asked_where(
    audit_engine: AsyncEngine, warehouse: DataSourceConfig, policy: AccessPolicy, tmp_path: Path
) -> None:
    sessions = session_factory(audit_engine)
    pipeline = sql_tools(warehouse, policy, AuditTrail(sessions))
    seen = await call(pipeline, as_person(tmp_path, "U01EAST"), "toolu_01", "sql_query",
                      source="dwh", sql="SELECT region, count(*) AS n FROM orders GROUP BY region")  # fmt: skip
    assert "East" in seen and "West" not in seen
    await call(pipeline, as_person(tmp_path, "U02FIN", channel="C0SALES"), "toolu_02", "sql_query",
               source="dwh", sql="SELECT id FROM orders LIMIT 7")  # fmt: skip

    first, second = await read_audit(sessions)
    assert (first.platform, first.user_id, first.channel) == ("slack", "U01EAST", "D1")
    assert (first.source, first.tool, first.row_count) == ("dwh", "sql_query", 1)
    assert EAST_ONLY in first.sql  # what ran, not what the model wrote
    assert (first.thread_id, first.tool_call_id, first.approval_id) == ("slack:T1:D1:1.1", "toolu_01", None)
    assert first.duration_ms > 0 and first.accessed_at <= datetime.now(UTC)
    # In a channel, the channel's audience decides the rewrite; the asker is still who is recorded.
    assert (second.user_id, second.channel, second.row_count, second.tool_call_id) == ("U02FIN", "C0SALES", 7, "toolu_02")
    assert "East" in second.sql


async def test_query_metric_and_describe_table_are_recorded_too(
    audit_engine: AsyncEngine, warehouse: DataSourceConfig, tmp_path: Path
) -> None:
    (tmp_path / "access.yaml").write_text(POLICY)
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": warehouse.url}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh")),
        BA_ACCESS_POLICY=str(tmp_path / "access.yaml"),
    )
    sessions = session_factory(audit_engine)
    audit = AuditTrail(sessions)
    describe = DescribeTableTool(config.datasources, access_policy=config.access_policy, audit=audit)
    catalog = MetricCatalog(config, SourceAccess(config.datasources, config.access_policy, audit))
    pipeline = ToolPipeline([QueryMetricTool(catalog), describe])
    east = as_person(tmp_path, "U01EAST")
    seen = await call(pipeline, east, "toolu_m", "query_metric", metrics=["gmv"], group_by=["region"])
    assert "East" in seen and "West" not in seen
    await call(pipeline, east, "toolu_d", "describe_table", table="dwh:orders")

    metric, *described = await read_audit(sessions)
    assert (metric.tool, metric.tool_call_id, metric.user_id, metric.row_count) == ("query_metric", "toolu_m", "U01EAST", 1)
    assert EAST_ONLY in metric.sql and "sum" in metric.sql.lower()
    # describe_table reads samples and statistics: each query that reached the answer is there.
    assert [d.tool_call_id for d in described] == ["toolu_d", "toolu_d"]
    assert all(EAST_ONLY in d.sql for d in described)


async def test_a_failed_audit_write_withholds_the_data(
    audit_engine: AsyncEngine, warehouse: DataSourceConfig, policy: AccessPolicy, tmp_path: Path
) -> None:
    async with audit_engine.begin() as conn:  # the audit store breaks under the running service
        await conn.execute(text("DROP TABLE data_access_audit"))
    pipeline = sql_tools(warehouse, policy, AuditTrail(session_factory(audit_engine)))
    seen = await call(pipeline, as_person(tmp_path, "U02FIN"), "toolu_x", "sql_query",
                      source="dwh", sql="SELECT region, amount FROM orders")  # fmt: skip
    assert "AUDIT_UNAVAILABLE" in seen and "could not be recorded" in seen and "result is withheld" in seen
    assert "East" not in seen and "West" not in seen
    # With a daily row limit whose budget cannot be read, the query does not even run.
    async with audit_engine.begin() as conn:
        await conn.execute(text("DROP TABLE data_row_budget"))
    limited = sql_tools(warehouse, policy, AuditTrail(session_factory(audit_engine), daily_rows=100))
    seen = await call(limited, as_person(tmp_path, "U02FIN"), "toolu_y", "sql_query",
                      source="dwh", sql="SELECT region, amount FROM orders")  # fmt: skip
    assert "AUDIT_UNAVAILABLE" in seen and "did not run" in seen and "West" not in seen


async def test_the_daily_row_limit_caps_then_refuses_with_a_clear_message(
    audit_engine: AsyncEngine, warehouse: DataSourceConfig, policy: AccessPolicy, tmp_path: Path
) -> None:
    sessions = session_factory(audit_engine)
    pipeline = sql_tools(warehouse, policy, AuditTrail(sessions, daily_rows=50))
    east, finance = as_person(tmp_path, "U01EAST"), as_person(tmp_path, "U02FIN")
    sql = "SELECT id, region FROM orders ORDER BY id"
    await call(pipeline, east, "c1", "sql_query", source="dwh", sql=sql)  # 40 East rows
    capped = await call(pipeline, east, "c2", "sql_query", source="dwh", sql=sql)  # 10 left
    assert "At least 10 rows" in capped and "only 10 rows were read: the rest of the asker's daily row limit" in capped
    refused = await call(pipeline, east, "c3", "sql_query", source="dwh", sql=sql)
    assert "You have used today's 50 rows of warehouse data; the limit resets at 00:00 UTC" in refused
    assert "DAILY_ROW_LIMIT" in refused and "East" not in refused
    recorded = await read_audit(sessions, user="slack:U01EAST")
    assert [(e.row_count, e.outcome) for e in recorded] == [(40, "succeeded"), (10, "succeeded"), (0, "refused")]
    # Another user has their own allowance.
    assert "West" in await call(pipeline, finance, "c4", "sql_query", source="dwh", sql=sql)


async def test_the_service_tool_set_records_and_limits_as_configured(
    audit_engine: AsyncEngine, warehouse: DataSourceConfig, tmp_path: Path
) -> None:
    settings = load_settings(
        _env_file=None, BA_DATA_DIR=str(tmp_path / "data"), BA_DATASOURCES=json.dumps({"dwh": warehouse.url}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh")), BA_USER_DAILY_ROWS="5",
    )  # fmt: skip
    sessions = session_factory(audit_engine)
    pipeline = ToolPipeline(default_tools(ToolDeps.of(settings, sessions)))
    ctx = as_person(tmp_path, "U1")
    five = await call(pipeline, ctx, "c1", "sql_query", source="dwh", sql="SELECT id FROM orders")
    assert "At least 5 rows" in five
    refused = await call(pipeline, ctx, "c2", "query_metric", metrics=["orders"], source="dwh")
    assert "You have used today's 5 rows of warehouse data" in refused
    recorded = [(e.tool, e.row_count, e.outcome) for e in await read_audit(sessions)]
    assert recorded == [("sql_query", 5, "succeeded"), ("query_metric", 0, "refused")]


async def test_yesterdays_rows_do_not_count_against_today(audit_engine: AsyncEngine) -> None:
    sessions = session_factory(audit_engine)
    now = datetime(2026, 12, 8, 9, 30, tzinfo=UTC)
    yesterday = RowBudget(sessions, 1000, clock=lambda: now - timedelta(hours=10))  # 23:30 the day before
    await yesterday.settle(await yesterday.reserve("slack", "U1", 900), 900)
    today = RowBudget(sessions, 1000, clock=lambda: now)
    assert (await today.reserve("slack", "U1", None)).granted == 1000


def access(user: str, *, rows: int = 1, source: str = "dwh", sql: str = "SELECT 1") -> DataAccess:
    return DataAccess(
        platform="slack", user_id=user, channel="D1", source=source, tool="sql_query", sql=sql,
        row_count=rows, duration_ms=1.5, thread_id="t1", tool_call_id=f"toolu_{user}",
    )  # fmt: skip


async def test_retention_cleanup_prunes_only_old_records(audit_engine: AsyncEngine, tmp_path: Path) -> None:
    sessions = session_factory(audit_engine)
    now = datetime.now(UTC)  # on PostgreSQL the database's own clock decides what is old
    await AuditTrail(sessions, clock=lambda: now - timedelta(days=31)).record(access("OLD"))
    await AuditTrail(sessions, clock=lambda: now - timedelta(days=29)).record(access("RECENT"))
    inbox = Inbox(audit_engine)
    config = scheduler_config(load_settings(_env_file=None, BA_AUDIT_RETENTION_DAYS="30"))
    scheduler = Scheduler(audit_engine, inbox, ScheduleStore(sessions), {}, tmp_path, config)
    try:
        assert await scheduler.run("cleanup", now)
    finally:
        await scheduler.stop()
        await inbox.close()
    assert [e.user_id for e in await read_audit(sessions)] == ["RECENT"]


async def test_the_audit_table_refuses_changes(audit_engine: AsyncEngine) -> None:
    sessions = session_factory(audit_engine)
    await AuditTrail(sessions).record(access("U1", rows=3))
    with pytest.raises(DBAPIError, match="append-only"):
        async with audit_engine.begin() as conn:
            await conn.execute(text("UPDATE data_access_audit SET row_count = 0"))
    if audit_engine.dialect.name == "postgresql":  # SQLite has no session setting to tell pruning apart
        for statement in ("DELETE FROM data_access_audit", "TRUNCATE data_access_audit"):
            with pytest.raises(DBAPIError, match="append-only"):
                async with audit_engine.begin() as conn:
                    await conn.execute(text(statement))
    assert [e.row_count for e in await read_audit(sessions)] == [3]


async def test_create_audit_table_matches_the_migration(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'unmigrated.db'}")
    try:
        await create_audit_table(engine)
        await create_audit_table(engine)  # idempotent
        sessions = session_factory(engine)
        await AuditTrail(sessions).record(access("U1"))
        with pytest.raises(DBAPIError, match="append-only"):
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE data_access_audit SET row_count = 0"))
        assert [e.user_id for e in await read_audit(sessions)] == ["U1"]
    finally:
        await engine.dispose()


def ba_agent(tmp_path: Path, database_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BA_AGENT, *args], env=clean_env(tmp_path, DATABASE_URL=database_url, **env),
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip


async def test_tool_run_is_recorded_and_ba_agent_audit_filters(
    database_url: str, audit_engine: AsyncEngine, warehouse: DataSourceConfig, tmp_path: Path
) -> None:
    sessions = session_factory(audit_engine)
    old = datetime.now(UTC) - timedelta(days=3)
    await AuditTrail(sessions, clock=lambda: old).record(access("U9", source="hr", sql="SELECT salary\nFROM pay"))
    (tmp_path / "access.yaml").write_text(POLICY)
    sources = {"BA_DATASOURCES": json.dumps({"dwh": warehouse.url}), "BA_ACCESS_POLICY": str(tmp_path / "access.yaml")}
    query = json.dumps({"source": "dwh", "sql": "SELECT count(*) AS n FROM orders"})
    ran = ba_agent(tmp_path, database_url, "tool", "run", "sql_query", "--json", query,
                   "--platform", "slack", "--user", "U01EAST", **sources)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["rows"] == [[40]]

    everything = ba_agent(tmp_path, database_url, "audit")
    assert everything.returncode == 0, everything.stderr
    lines = everything.stdout.splitlines()
    assert "slack:U9 in D1  hr  sql_query  1 rows" in lines[0] and lines[1:3] == ["    SELECT salary", "    FROM pay"]
    assert "slack:U01EAST  dwh  sql_query  1 rows" in lines[3] and "thread cli  call cli_" in lines[3]
    assert EAST_ONLY in lines[4]

    by_user = ba_agent(tmp_path, database_url, "audit", "--user", "slack:U01EAST").stdout
    by_source = ba_agent(tmp_path, database_url, "audit", "--source", "hr").stdout
    recent = ba_agent(tmp_path, database_url, "audit", "--since", "24h").stdout
    since_date = ba_agent(tmp_path, database_url, "audit", "--since", f"{old:%Y-%m-%d}", "--limit", "1").stdout
    assert "U01EAST" in by_user and "U9" not in by_user
    assert "U9" in by_source and "U01EAST" not in by_source
    assert "U01EAST" in recent and "U9" not in recent
    assert "U01EAST" in since_date and "U9" not in since_date  # the latest one only
    none = ba_agent(tmp_path, database_url, "audit", "--user", "nobody")
    assert none.stdout.strip() == "(no data access recorded matching these filters)"
    bad = ba_agent(tmp_path, database_url, "audit", "--since", "last tuesday")
    assert bad.returncode == 2 and "--since 'last tuesday'" in bad.stderr
