"""list_tables, describe_table and sql_query through the real tools: uploads, demo data, and
operator-configured sources (a DuckDB file and the local PostgreSQL) with their allowlists."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import duckdb
import psycopg
import pytest

from agent_core.config import AgentConfig
from agent_core.data.conversation import conversation_database, demo_database
from agent_core.data.demo import ensure_demo_database
from agent_core.data.ingest import load_upload
from agent_core.data.source_config import DataSourceConfig
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.data_tools import DescribeTableTool, ListTablesTool
from agent_core.tools.deps import ToolDeps
from agent_core.tools.sql import SqlQueryTool
from agent_core.tools.standard import default_tools, tools_prompt_section

ORDERS_CSV = """order_date,region,gmv,note
2026-10-01,East,1200.5,
2026-10-02,North,800,rush
2026-10-03,East,,late
2026-10-04,South,450.25,
"""


def make_ctx(data_dir: Path, thread_id: str = "slack:T1:C1:1700000001.000100", **kw) -> RunContext:
    ctx = RunContext(
        thread_id=thread_id, data_dir=data_dir, **{"channel": "C1", "user": "U1", **kw}
    )
    ensure_demo_database(demo_database(ctx))
    return ctx


def upload(ctx: RunContext, tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / f"incoming-{uuid.uuid4().hex}"
    path.write_text(text, encoding="utf-8")
    load_upload(conversation_database(ctx), path, name)


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return make_ctx(tmp_path / "data")


@pytest.fixture
def archive(tmp_path: Path) -> DataSourceConfig:
    """A DuckDB-file source open to everyone."""
    path = tmp_path / "archive.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE events AS SELECT range AS id, range % 3 AS kind, "
            "DATE '2026-01-01' + CAST(range AS INTEGER) AS day FROM range(50)"
        )
    return DataSourceConfig(name="archive", url=f"duckdb://{path}")


async def run(tool, ctx: RunContext, **args):
    return await tool.run(tool.Input(**args), ctx)


async def refused(tool, ctx: RunContext, **args) -> ToolError:
    with pytest.raises(ToolError) as caught:
        await run(tool, ctx, **args)
    return caught.value


# --- uploads and demo ------------------------------------------------------------------------


async def test_list_tables_shows_uploads_demo_and_only_allowed_sources(
    ctx: RunContext, tmp_path: Path, archive: DataSourceConfig
) -> None:
    upload(ctx, tmp_path, "orders.csv", ORDERS_CSV)
    finance = DataSourceConfig(name="finance", url=archive.url, allowed_channels=["CFIN"])
    listing = await run(ListTablesTool({"archive": archive, "finance": finance}), ctx)
    assert [(t.name, t.row_count, t.source_file) for t in listing.uploaded] == [
        ("orders", 4, "orders.csv")
    ]
    assert [(t.name, t.row_count) for t in listing.demo] == [("demo.sales", 13_800)]
    assert [(s.name, s.kind) for s in listing.sources] == [("archive", "duckdb")]


async def test_describe_uploaded_csv(ctx: RunContext, tmp_path: Path) -> None:
    upload(ctx, tmp_path, "orders.csv", ORDERS_CSV)
    profile = await run(DescribeTableTool(), ctx, table="orders")
    assert (profile.table, profile.origin, profile.row_count) == ("orders", "upload", 4)
    assert profile.source_file == "orders.csv"
    columns = {c.name: c for c in profile.columns}
    assert columns["order_date"].type == "DATE"
    assert (columns["order_date"].min, columns["order_date"].max) == (
        date(2026, 10, 1),
        date(2026, 10, 4),
    )
    assert columns["gmv"].type == "DOUBLE" and columns["gmv"].null_share == 0.25
    assert (columns["gmv"].min, columns["gmv"].max) == (450.25, 1200.5)
    assert columns["region"].min is None and columns["note"].null_share == 0.5
    assert len(profile.sample_rows) == 4 and profile.sample_rows[0][1] == "East"
    # Case and an explicit main schema are forgiven, as DuckDB itself would.
    assert (await run(DescribeTableTool(), ctx, table="main.ORDERS")).table == "orders"


async def test_describe_demo_sales(ctx: RunContext) -> None:
    profile = await run(DescribeTableTool(), ctx, table="demo.sales")
    assert (profile.table, profile.origin, profile.row_count) == ("demo.sales", "demo", 13_800)
    columns = {c.name: c for c in profile.columns}
    assert (columns["date"].min, columns["date"].max) == (date(2026, 5, 1), date(2026, 10, 31))
    assert columns["orders"].null_share == 0.0 and columns["orders"].min > 0
    assert len(profile.sample_rows) == 5


async def test_describe_unknown_tables_are_invalid_parameters(ctx: RunContext) -> None:
    error = await refused(DescribeTableTool(), ctx, table="nope")
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "no file has been uploaded" in str(
        error
    )
    error = await refused(DescribeTableTool(), ctx, table="demo.nope")
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "demo.sales" in str(error)
    error = await refused(DescribeTableTool(), ctx, table="other.thing")
    assert error.error_type is ErrorType.INVALID_PARAMETERS


async def test_sql_query_over_uploads_and_demo(ctx: RunContext, tmp_path: Path) -> None:
    upload(ctx, tmp_path, "orders.csv", ORDERS_CSV)
    result = await run(
        SqlQueryTool(), ctx, sql="SELECT region, sum(gmv) AS gmv FROM orders GROUP BY 1 ORDER BY 1"
    )
    assert result.rows == [["East", 1200.5], ["North", 800.0], ["South", 450.25]]
    result = await run(SqlQueryTool(), ctx, sql="SELECT * FROM demo.sales", max_rows=3)
    assert result.row_count == 3 and result.truncated
    error = await refused(SqlQueryTool(), ctx, sql="DELETE FROM demo.sales")
    assert error.error_type is ErrorType.PERMISSION_DENIED
    error = await refused(SqlQueryTool(), ctx, sql="SELEC 1")
    assert error.error_type is ErrorType.INVALID_PARAMETERS


async def test_dm_upload_is_invisible_from_another_conversation(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    dm = make_ctx(data_dir, "slack:T1:D1:main", channel="D1", is_dm=True)
    upload(dm, tmp_path, "salary.csv", "name,salary\nann,100\n")
    other = make_ctx(data_dir, "slack:T1:D2:main", channel="D2", user="U2", is_dm=True)

    assert [t.name for t in (await run(ListTablesTool(), dm)).uploaded] == ["salary"]
    assert (await run(ListTablesTool(), other)).uploaded == []
    error = await refused(SqlQueryTool(), other, sql="SELECT * FROM salary")
    assert error.error_type is ErrorType.EXECUTION_ERROR
    error = await refused(DescribeTableTool(), other, table="salary")
    assert error.error_type is ErrorType.INVALID_PARAMETERS


# --- configured sources ----------------------------------------------------------------------


async def test_duckdb_source_list_describe_query(
    ctx: RunContext, archive: DataSourceConfig
) -> None:
    sources = {"archive": archive}
    listing = await run(ListTablesTool(sources), ctx, source="archive")
    assert [(t.name, t.kind) for t in listing.tables] == [("main.events", "table")]

    profile = await run(DescribeTableTool(sources), ctx, table="archive:main.events")
    assert (profile.origin, profile.source, profile.row_count) == ("source", "archive", 50)
    columns = {c.name: c for c in profile.columns}
    assert (columns["id"].min, columns["id"].max) == (0, 49)
    assert columns["day"].max == date(2026, 2, 19) and columns["kind"].null_share == 0.0

    result = await run(
        SqlQueryTool(sources),
        ctx,
        sql="SELECT kind, count(*) FROM events GROUP BY 1 ORDER BY 1",
        source="archive",
    )
    assert result.rows == [[0, 17], [1, 17], [2, 16]]
    error = await refused(SqlQueryTool(sources), ctx, sql="DROP TABLE events", source="archive")
    assert error.error_type is ErrorType.PERMISSION_DENIED


async def test_unknown_source_lists_the_usable_ones(
    ctx: RunContext, archive: DataSourceConfig
) -> None:
    error = await refused(SqlQueryTool({"archive": archive}), ctx, sql="SELECT 1", source="nope")
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "archive" in str(error)


@pytest.fixture
def pg_source(postgres_available: str) -> Iterator[tuple[DataSourceConfig, str]]:
    """A throw-away schema in database ``test`` with an orders table, open to channel C1 only."""
    schema = f"ba_tools_{uuid.uuid4().hex[:8]}"
    dsn = postgres_available.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, day date NOT NULL, "
            f"region text, gmv numeric(12, 2))"
        )
        conn.execute(
            f"INSERT INTO {schema}.orders SELECT g, DATE '2026-10-01' + g, "
            f"CASE WHEN g % 4 = 0 THEN NULL ELSE 'r' || (g % 3) END, g * 10.5 "
            f"FROM generate_series(1, 40) g"
        )
    cfg = DataSourceConfig(
        # The local superuser: the operator accepts the risk, as the privilege check requires.
        name="warehouse", url=dsn, allowed_channels=["C1"], description="Test warehouse", allow_privileged=True,
    )
    try:
        yield cfg, schema
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_postgres_source_with_allowlist(
    ctx: RunContext, pg_source: tuple[DataSourceConfig, str]
) -> None:
    cfg, schema = pg_source
    sources = {"warehouse": cfg}
    result = await run(
        SqlQueryTool(sources),
        ctx,
        sql=f"SELECT count(*) AS n, sum(gmv) AS gmv FROM {schema}.orders",
        source="warehouse",
    )
    assert result.columns == ["n", "gmv"] and result.rows == [[40, pytest.approx(8610)]]

    listing = await run(ListTablesTool(sources), ctx, source="warehouse", schema_name=schema)
    assert [t.name for t in listing.tables] == [f"{schema}.orders"]
    overview = await run(ListTablesTool(sources), ctx)
    assert [(s.name, s.kind, s.description) for s in overview.sources] == [
        ("warehouse", "postgresql", "Test warehouse")
    ]

    profile = await run(DescribeTableTool(sources), ctx, table=f"warehouse:{schema}.orders")
    assert profile.table == f"{schema}.orders" and profile.row_count == 40
    columns = {c.name: c for c in profile.columns}
    assert columns["region"].null_share == 0.25 and columns["region"].min is None
    assert (columns["day"].min, columns["day"].max) == (date(2026, 10, 2), date(2026, 11, 10))
    assert float(columns["gmv"].max) == 420.0

    error = await refused(
        SqlQueryTool(sources), ctx, sql=f"DELETE FROM {schema}.orders", source="warehouse"
    )
    assert error.error_type is ErrorType.PERMISSION_DENIED

    # Another channel: the source is neither listed nor usable.
    elsewhere = make_ctx(ctx.data_dir, "slack:T1:C2:1700000002.000100", channel="C2")
    assert (await run(ListTablesTool(sources), elsewhere)).sources == []
    for tool, args in (
        (SqlQueryTool(sources), {"sql": "SELECT 1", "source": "warehouse"}),
        (ListTablesTool(sources), {"source": "warehouse"}),
        (DescribeTableTool(sources), {"table": f"warehouse:{schema}.orders"}),
    ):
        error = await refused(tool, elsewhere, **args)
        assert error.error_type is ErrorType.PERMISSION_DENIED


# --- catalog ---------------------------------------------------------------------------------


def test_default_tools_and_stable_prompt_section(tmp_path: Path, archive: DataSourceConfig) -> None:
    config = AgentConfig(model="m", data_dir=tmp_path / "data")
    names = [tool.name for tool in default_tools(ToolDeps.of(config.model_copy(update={"datasources": {"archive": archive}})))]
    assert names[0] == "sql_query"
    assert set(names) == {
        "sql_query", "list_tables", "describe_table", "list_metrics", "query_metric", "detect_anomalies", "attribute_change",
        "make_chart", "generate_report", "ls", "read_file", "write_file", "edit_file", "grep", "glob",
    }  # fmt: skip
    assert demo_database(RunContext(thread_id="-", data_dir=config.data_dir)).exists()
    section = tools_prompt_section(config)
    assert section == tools_prompt_section(config) and "demo.sales" in section
    assert date.today().isoformat() not in section
    with_sources = tools_prompt_section(config.model_copy(update={"datasources": {"archive": archive}}))
    assert "sql_query(source=" in with_sources and "archive" not in with_sources
