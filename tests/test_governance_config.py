"""Configuration that fails closed: a misspelt key of a data source, a source named like the bundled
demo data, a monitor naming a metric or platform that does not exist all stop start-up with a
message naming what is wrong and what is valid -- never a source opened wider than configured."""

from __future__ import annotations

import json
import subprocess
import urllib.request
import uuid
from pathlib import Path

import duckdb
import psycopg
import pytest

from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.access import SourceAccess
from agent_core.governance.availability import REVALIDATE_AFTER_S, SourceChecks
from agent_core.governance.policy import SourcePolicy
from agent_core.governance.policy_catalog import check_policy_names
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.protocol import ToolError
from agent_core.tools.sql import SqlQueryInput, SqlQueryTool
from gateway.cli.startup_checks import verify_monitors_file
from gateway.config import load_settings
from tests.readonly_warehouse import postgres_readonly
from tests.serve_process import BA_AGENT, clean_env, free_port, start, stop, wait_healthy
from tests.test_semantic import build_duckdb
from tests.test_sources import PG_URL
from tests.waiting import scaled

MONITORS = """\
monitors:
  - name: gmv-watch
    metric: {metric}
    cron: "0 9 * * *"
    platform: {platform}
    workspace: T1
    channel: C0OPS
    creator: U0OPS
"""


def ba_agent(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BA_AGENT, *args], env=clean_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'svc.db'}", **env),
        cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip


def warehouse(tmp_path: Path) -> str:
    path = tmp_path / "dwh.duckdb"
    build_duckdb(path)
    return f"duckdb://{path}"


def test_a_misspelt_data_source_key_stops_the_tool_naming_it_and_the_valid_ones(tmp_path: Path) -> None:
    sources = {"dwh": {"url": warehouse(tmp_path), "allowed_chanels": ["C1"], "rowcap": 5}}
    query = json.dumps({"source": "dwh", "sql": "SELECT count(*) AS n FROM orders"})
    ran = ba_agent(tmp_path, "tool", "run", "sql_query", "--json", query, "--platform", "slack", "--user", "U1",
                   BA_DATASOURCES=json.dumps(sources))  # fmt: skip
    assert ran.returncode == 2 and ran.stdout == ""  # nothing was read
    assert "BA_DATASOURCES: Data source 'dwh': unknown setting 'allowed_chanels'" in ran.stderr
    assert "unknown setting 'rowcap'" in ran.stderr and "allowed_channels" in ran.stderr and "row_cap" in ran.stderr
    assert "Value error" not in ran.stderr and "pydantic" not in ran.stderr


def test_a_source_named_demo_is_refused(tmp_path: Path) -> None:
    sources = json.dumps({"demo": warehouse(tmp_path)})
    ran = ba_agent(tmp_path, "tool", "run", "list_tables", "--json", "{}", BA_DATASOURCES=sources)
    assert ran.returncode == 2
    assert "Data source 'demo'" in ran.stderr and "bundled demo data" in ran.stderr and "Value error" not in ran.stderr


def test_serve_refuses_a_monitors_file_naming_an_unknown_metric_or_platform(tmp_path: Path) -> None:
    for metric, platform, expected in (
        ("gmvv", "slack", "no metric 'gmvv' is defined (metrics: "),
        ("gmv", "teams", "no chat platform is called 'teams' (platforms: "),
    ):
        monitors = tmp_path / f"monitors-{metric}-{platform}.yaml"
        monitors.write_text(MONITORS.format(metric=metric, platform=platform))
        served = ba_agent(tmp_path, "serve", "--port", str(free_port()), BA_MONITORS_FILE=str(monitors))
        assert served.returncode == 2, served.stderr
        assert "BA_MONITORS_FILE: monitor 'gmv-watch': " + expected in served.stderr
    # The same file with a defined metric and a known platform passes the checks.
    good = tmp_path / "monitors.yaml"
    good.write_text(MONITORS.format(metric="gmv", platform="slack"))
    verify_monitors_file(load_settings(_env_file=None, BA_DATA_DIR=str(tmp_path / "data"), BA_MONITORS_FILE=str(good)))


# --- a source whose database cannot be reached at start-up ---------------------------------------

UNREACHABLE = "postgresql://ba_reader@127.0.0.1:1/test"  # nothing listens on port 1


def test_a_source_that_cannot_be_checked_is_unavailable_with_a_clear_message(tmp_path: Path) -> None:
    sources = json.dumps({"dwh": UNREACHABLE})
    query = json.dumps({"source": "dwh", "sql": "SELECT 1 AS one FROM orders"})
    ran = ba_agent(tmp_path, "tool", "run", "sql_query", "--json", query, "--platform", "slack", "--user", "U1",
                   BA_DATASOURCES=sources)  # fmt: skip
    assert ran.returncode == 1, ran.stderr
    message = json.loads(ran.stdout)["error"]["message"]
    assert message.startswith("The data source 'dwh' is unavailable right now: its database could not be reached")

    port = free_port()
    served = start(clean_env(tmp_path, BA_DATASOURCES=sources), port, tmp_path)
    try:
        wait_healthy(port)  # one database down does not keep the bot from starting
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=scaled(5)) as resp:
            ready = json.loads(resp.read())
    finally:
        log = stop(served)
    assert ready["sources"]["dwh"].startswith("unavailable: its database could not be reached")
    assert "stays unavailable until the check passes" in log


async def test_an_unavailable_source_opens_once_its_check_passes(tmp_path: Path) -> None:
    """Checked again when next used (at most every 30 s): no restart needed once the database is back."""
    now = [0.0]
    checks = SourceChecks(clock=lambda: now[0])
    role = f"ba_late_{uuid.uuid4().hex[:8]}"  # the database refuses this login until it exists
    cfg = DataSourceConfig(name="dwh", url=f"postgresql://{role}@127.0.0.1:5432/test")
    tool = SqlQueryTool(access=SourceAccess({"dwh": cfg}, checks=checks))
    ctx = RunContext(thread_id="t", data_dir=tmp_path, channel="D1", user="U1", is_dm=True)
    args = SqlQueryInput(source="dwh", sql="SELECT 41 + 1 AS answer")
    with pytest.raises(ToolError, match="is unavailable right now"):
        await tool.run(args, ctx)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with pytest.raises(ToolError, match="is unavailable right now"):  # not checked again at once
            await tool.run(args, ctx)
        now[0] += 31
        assert (await tool.run(args, ctx)).rows == [[42]]
        assert checks.status([cfg]) == {"dwh": "available"}
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP ROLE {role}")


# --- the access policy's names against the catalog ------------------------------------------------

POLICY = """\
groups:
  east_sales: [slack:U01EAST]
sources:
  dwh:
    groups: [east_sales, default]
    tables:
      {table}:
        row_filters:
          east_sales: "region = 'East'"
        hidden_columns: [{column}]
"""


def policy_file(tmp_path: Path, table: str = "orders", column: str = "customer_id") -> str:
    path = tmp_path / f"access-{table}-{column}.yaml"
    path.write_text(POLICY.format(table=table, column=column))
    return str(path)


def test_serve_refuses_a_policy_naming_a_table_or_column_the_source_lacks(tmp_path: Path) -> None:
    sources = json.dumps({"dwh": warehouse(tmp_path)})
    for table, column, expected in (
        ("order", "customer_id", "source 'dwh' has no table 'order' (did you mean main.orders, orders?)"),
        ("orders", "customer", "table 'orders' of source 'dwh' has no column 'customer' (its columns: id, "),
    ):
        served = ba_agent(tmp_path, "serve", "--port", str(free_port()),
                          BA_DATASOURCES=sources, BA_ACCESS_POLICY=policy_file(tmp_path, table, column))  # fmt: skip
        assert served.returncode == 2, served.stderr
        assert "BA_ACCESS_POLICY: " + expected in served.stderr


def test_serve_warns_of_a_view_that_reads_a_protected_table(tmp_path: Path) -> None:
    url = warehouse(tmp_path)
    with duckdb.connect(url.removeprefix("duckdb://")) as conn:
        conn.execute("CREATE VIEW east_orders AS SELECT * FROM orders WHERE region = 'East'")
    port = free_port()
    served = start(clean_env(tmp_path, BA_DATASOURCES=json.dumps({"dwh": url}), BA_ACCESS_POLICY=policy_file(tmp_path)),
                   port, tmp_path)  # fmt: skip
    try:
        wait_healthy(port)
    finally:
        log = stop(served)
    assert "the view main.east_orders of source 'dwh' reads the protected table 'orders'" in log


async def test_a_source_whose_catalog_no_longer_matches_the_policy_is_closed_when_checked_again(tmp_path: Path) -> None:
    url = warehouse(tmp_path)
    settings = load_settings(_env_file=None, BA_DATA_DIR=str(tmp_path / "data"), BA_DATASOURCES=json.dumps({"dwh": url}),
                             BA_ACCESS_POLICY=policy_file(tmp_path))  # fmt: skip
    now = [0.0]
    checks = SourceChecks(clock=lambda: now[0])
    tool = SqlQueryTool(access=SourceAccess(settings.datasources, settings.access_policy, checks=checks))
    ctx = RunContext(thread_id="t", data_dir=tmp_path, channel="D1", user="U01EAST", is_dm=True,
                     chat=ChatOrigin(platform="slack", workspace="T1"))  # fmt: skip
    count = SqlQueryInput(source="dwh", sql="SELECT count(*) AS n FROM orders_2026")
    with duckdb.connect(url.removeprefix("duckdb://")) as conn:
        conn.execute("CREATE TABLE orders_2026 AS SELECT * FROM orders")
        every = conn.execute("SELECT count(*) FROM orders").fetchall()
    assert (await tool.run(count, ctx)).rows == [list(row) for row in every]  # not protected: every row
    with duckdb.connect(url.removeprefix("duckdb://")) as conn:  # the protected table is renamed
        conn.execute("ALTER TABLE orders RENAME TO orders_old")
    now[0] += REVALIDATE_AFTER_S
    with pytest.raises(ToolError, match="names what it lacks: source 'dwh' has no table 'orders'"):
        await tool.run(count, ctx)


def test_views_child_tables_and_partitions_of_a_protected_table_are_found_on_postgresql() -> None:
    def fill(conn: psycopg.Connection, schema: str) -> None:
        conn.execute(f"CREATE TABLE {schema}.orders (id int, region text, customer_id int) PARTITION BY LIST (region)")
        conn.execute(f"CREATE TABLE {schema}.orders_east PARTITION OF {schema}.orders FOR VALUES IN ('East')")
        conn.execute(f"CREATE VIEW {schema}.all_orders AS SELECT id, region FROM {schema}.orders")
        conn.execute(f"CREATE TABLE {schema}.ledger (id int, amount int)")
        conn.execute(f"CREATE TABLE {schema}.ledger_2026 () INHERITS ({schema}.ledger)")

    with postgres_readonly("polcat", fill) as (url, schema):
        cfg = DataSourceConfig(name="dwh", url=url)
        policy = SourcePolicy.model_validate({
            "groups": ["default"],
            "tables": {
                f"{schema}.orders": {"hidden_columns": ["customer_id"]},
                f"{schema}.ledger": {"row_filters": {"default": "id > 0"}},
            },
        })  # fmt: skip
        check = check_policy_names(cfg, policy)
        assert check.errors == []
        assert sorted(w.split(" of source")[0] for w in check.warnings) == [
            f"the child table {schema}.ledger_2026",
            f"the partition {schema}.orders_east",
            f"the view {schema}.all_orders",
        ]
        misspelt = SourcePolicy.model_validate({"groups": ["default"], "tables": {"ordres": {"hidden_columns": ["customer_id"]}}})
        [error] = check_policy_names(cfg, misspelt).errors
        assert error.startswith("source 'dwh' has no table 'ordres' (did you mean ") and "orders" in error
