"""The schema catalog and `search_schema`: a 500-table PostgreSQL warehouse read through a
read-only role, searched in English and Chinese; refreshes that follow the warehouse; sources
closed to a conversation; verified examples; MariaDB and DuckDB sources."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import duckdb
import psycopg
import pymysql
import pytest
from psycopg import sql

from agent_core.catalog.examples import ExamplesFileError, VerifiedExample, load_examples
from agent_core.catalog.refresh import refresh_catalog
from agent_core.catalog.search import SchemaSearch
from agent_core.catalog.store import CatalogStore, create_catalog_tables
from agent_core.config import AgentConfig
from agent_core.data.source_config import DataSourceConfig
from agent_core.run_context import RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.protocol import ToolError
from agent_core.tools.schema_tools import SearchSchemaInput, search_schema_tool
from tests.schema_catalog_warehouse import ADMIN_URL, QUESTIONS, Table, create_tables, generated_tables, warehouse
from tests.test_sources import _ensure_server, _start_postgres_command


@pytest.fixture(scope="module")
def big_warehouse() -> Iterator[DataSourceConfig]:
    """508 tables in PostgreSQL, analyzed, readable by a read-only role."""
    _ensure_server(5432, _start_postgres_command())
    with warehouse(generated_tables(500)) as wh:
        yield DataSourceConfig(name="dwh", url=wh.url)


@pytest.fixture(scope="module")
def big_catalog(big_warehouse: DataSourceConfig, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The warehouse's catalog, refreshed once into an SQLite database made without the gateway."""
    url = f"sqlite:///{tmp_path_factory.mktemp('catalog') / 'catalog.db'}"

    async def refresh() -> None:
        engine = create_engine(url)
        await create_catalog_tables(engine)
        outcomes = await refresh_catalog({"dwh": big_warehouse}, session_factory(engine))
        await engine.dispose()
        assert [(o.source, o.table_count, o.error) for o in outcomes] == [("dwh", 508, None)]

    asyncio.run(refresh())
    return url


@pytest.fixture
async def big_search(big_catalog: str, big_warehouse: DataSourceConfig) -> AsyncIterator[SchemaSearch]:
    engine = create_engine(big_catalog)
    examples = [
        VerifiedExample(
            question="Click-through rate of each campaign last week",
            sql="SELECT campaign_name, SUM(clicks)::numeric / SUM(impressions) AS ctr "
            "FROM mkt_campaign_daily_performance GROUP BY 1 ORDER BY 2 DESC",
            source="dwh",
        ),
        VerifiedExample(question="Headcount by department", sql="SELECT department, COUNT(*) FROM hr_x GROUP BY 1", source="dwh"),
    ]
    yield SchemaSearch(session_factory(engine), {"dwh": big_warehouse}, examples)
    await engine.dispose()


@pytest.mark.parametrize(("question", "table"), QUESTIONS, ids=[table for _, table in QUESTIONS])
async def test_search_finds_the_table_that_answers_the_question_in_the_top_three(
    big_search: SchemaSearch, question: str, table: str
) -> None:
    result = await big_search.search(question, ["dwh"], limit=3)
    names = [hit.name.split(".", 1)[1] for hit in result.tables]
    assert table in names, names
    hit = result.tables[names.index(table)]
    assert hit.source == "dwh" and hit.columns and hit.row_count is not None


async def test_search_returns_columns_comments_values_and_the_matching_example(big_search: SchemaSearch) -> None:
    result = await big_search.search("Which campaigns had the best click-through rate per channel?", ["dwh"], limit=3)
    top = result.tables[0]
    assert top.name.endswith(".mkt_campaign_daily_performance")
    assert top.comment == "Daily performance per ad campaign: impressions, clicks, spend and conversions"
    columns = {c.name: c for c in top.columns}
    assert columns["ctr"].comment == "click-through rate: clicks / impressions" and columns["ctr"].type == "numeric(6,4)"
    assert columns["channel"].values == ["display", "email", "search", "social"]
    assert top.row_count == 40
    # The verified example about the same thing comes back; the unrelated one does not.
    assert [e.question for e in result.examples] == ["Click-through rate of each campaign last week"]


async def test_a_source_closed_to_the_conversation_is_never_searched(
    big_catalog: str, big_warehouse: DataSourceConfig, tmp_path: Path
) -> None:
    closed = big_warehouse.model_copy(update={"allowed_channels": ["CFIN"]})
    engine = create_engine(big_catalog)
    try:
        config = AgentConfig(model="m", data_dir=tmp_path, datasources={"dwh": closed})
        tool = search_schema_tool(config, session_factory(engine))
        finance = RunContext(thread_id="t", data_dir=tmp_path, channel="CFIN", user="U1")
        found = await tool.run(SearchSchemaInput(question="support tickets escalated"), finance)
        assert found["tables"][0]["name"].endswith(".support_tickets")
        # Metric definitions (the bundled demo model here) are searched too, by name and description.
        gmv = await tool.run(SearchSchemaInput(question="weekly GMV by region"), finance)
        assert gmv["metrics"][0]["name"] == "gmv" and gmv["metrics"][0]["source"] == "demo"
        elsewhere = RunContext(thread_id="t", data_dir=tmp_path, channel="CSALES", user="U1")
        with pytest.raises(ToolError, match="No company data source is available"):
            await tool.run(SearchSchemaInput(question="support tickets escalated"), elsewhere)
    finally:
        await engine.dispose()


@pytest.fixture
def small_warehouse() -> Iterator[tuple[DataSourceConfig, str]]:
    _ensure_server(5432, _start_postgres_command())
    with warehouse(generated_tables(30), analyze=False) as wh:
        yield DataSourceConfig(name="dwh", url=wh.url), wh.schema


async def test_a_refresh_picks_up_new_and_dropped_tables(
    small_warehouse: tuple[DataSourceConfig, str], database_url: str
) -> None:
    """On the migrated service database (SQLite and PostgreSQL: revision 0003)."""
    source, schema = small_warehouse
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    search = SchemaSearch(sessions, {"dwh": source})
    question = "loyalty points redeemed by members"
    try:
        # The first search reads a source never catalogued.
        before = await search.search(question, ["dwh"], limit=3)
        assert all("loyalty" not in hit.name for hit in before.tables)
        [state] = await CatalogStore(sessions).states()
        assert state.table_count == 38 and state.error is None

        loyalty = Table(
            "crm_loyalty_points_ledger",
            "Loyalty programme: points earned and redeemed per member",
            [("member_id", "bigint", None), ("points_redeemed", "integer", None), ("tier", "text", "member tier")],
            [(1, 10, "gold"), (2, 0, "silver"), (3, 5, "gold")],
        )
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            create_tables(conn, schema, [loyalty])
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "support_tickets")))
        [outcome] = await refresh_catalog({"dwh": source}, sessions)
        assert outcome.refreshed and outcome.table_count == 38

        after = await search.search(question, ["dwh"], limit=3)
        top = after.tables[0]
        assert top.name == f"{schema}.crm_loyalty_points_ledger" and top.row_count == 3
        assert [c.values for c in top.columns if c.name == "tier"] == [["gold", "silver"]]
        gone = await search.search("support tickets escalated per agent", ["dwh"], limit=5)
        assert all(not hit.name.endswith(".support_tickets") for hit in gone.tables)
    finally:
        await engine.dispose()


async def test_a_source_that_cannot_be_read_keeps_its_last_catalog(
    small_warehouse: tuple[DataSourceConfig, str], tmp_path: Path
) -> None:
    source, _ = small_warehouse
    engine = create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    await create_catalog_tables(engine)
    sessions = session_factory(engine)
    try:
        await refresh_catalog({"dwh": source}, sessions)
        down = source.model_copy(update={"url": "postgresql://nobody@127.0.0.1:1/test"})
        [outcome] = await refresh_catalog({"dwh": down}, sessions)
        assert not outcome.refreshed and "Could not connect to 'dwh'" in (outcome.error or "")
        [state] = await CatalogStore(sessions).states()
        assert state.table_count == 38 and state.error == outcome.error and state.refreshed_at is not None
        result = await SchemaSearch(sessions, {"dwh": down}).search("shipping delay by carrier", ["dwh"], limit=1)
        assert result.tables[0].name.endswith(".logi_shipments")
        # Fresh enough: nothing is read again.
        [skipped] = await refresh_catalog({"dwh": down}, sessions, stale_after=timedelta(hours=1))
        assert not skipped.refreshed and skipped.error is None
    finally:
        await engine.dispose()


def test_examples_file_is_validated_with_file_and_line(tmp_path: Path) -> None:
    good = tmp_path / "examples.yml"
    good.write_text(
        "examples:\n"
        "  - question: Weekly GMV by region\n"
        "    source: dwh\n"
        "    sql: SELECT region, SUM(gmv) FROM orders GROUP BY 1\n"
        "  - question: Demo sales by channel\n"
        "    sql: SELECT channel, SUM(gmv) FROM demo.sales GROUP BY 1\n"
    )
    examples = load_examples(good, {"dwh"})
    assert [(e.question, e.source) for e in examples] == [("Weekly GMV by region", "dwh"), ("Demo sales by channel", None)]

    unknown_source = tmp_path / "unknown.yml"
    unknown_source.write_text(good.read_text().replace("source: dwh", "source: crm"))
    with pytest.raises(ExamplesFileError, match=r"unknown\.yml:3: examples\.0\.source: no data source 'crm'"):
        load_examples(unknown_source, {"dwh"})
    missing_sql = tmp_path / "missing.yml"
    missing_sql.write_text("examples:\n  - question: Weekly GMV\n    source: dwh\n")
    with pytest.raises(ExamplesFileError, match=r"missing\.yml:2: examples\.0\.sql: Field required"):
        load_examples(missing_sql, {"dwh"})
    broken = tmp_path / "broken.yml"
    broken.write_text("examples:\n  - question: [unclosed\n")
    with pytest.raises(ExamplesFileError, match=r"broken\.yml:3: not valid YAML"):
        load_examples(broken, {"dwh"})


@pytest.fixture
def mariadb_source() -> Iterator[DataSourceConfig]:
    _ensure_server(3306, ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"])
    suffix = uuid.uuid4().hex[:8]
    database, user = f"catalog_{suffix}", f"catalog_ro_{suffix}"
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database} CHARACTER SET utf8mb4")
        cur.execute(
            f"CREATE TABLE {database}.member_refunds (id INT PRIMARY KEY, channel VARCHAR(20) COMMENT '渠道', "
            f"amount DECIMAL(10, 2) COMMENT '退款金额') COMMENT = '会员退款记录'"
        )
        cur.executemany(f"INSERT INTO {database}.member_refunds VALUES (%s, %s, %s)", [(1, "app", 5), (2, "web", 7)])
        cur.execute(f"CREATE TABLE {database}.web_sessions (id INT PRIMARY KEY, device VARCHAR(20))")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'ro-pass'")
        cur.execute(f"GRANT SELECT ON {database}.* TO '{user}'@'%'")
    try:
        yield DataSourceConfig(name="shop", url=f"mysql://{user}:ro-pass@127.0.0.1:3306/{database}")
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
            cur.execute(f"DROP USER '{user}'@'%'")
        conn.close()


async def test_mariadb_and_duckdb_sources_are_catalogued_and_searched(mariadb_source: DataSourceConfig, tmp_path: Path) -> None:
    archive = tmp_path / "archive.duckdb"
    with duckdb.connect(str(archive)) as conn:
        conn.execute("CREATE SCHEMA finance")
        conn.execute("CREATE TABLE finance.fx_rates (day DATE, currency VARCHAR, rate DOUBLE)")
        conn.execute("COMMENT ON TABLE finance.fx_rates IS 'Daily exchange rates against CNY'")
        conn.execute("INSERT INTO finance.fx_rates VALUES ('2026-11-01', 'USD', 7.1), ('2026-11-01', 'EUR', 7.7)")
    sources = {"shop": mariadb_source, "archive": DataSourceConfig(name="archive", url=f"duckdb:///{archive}")}
    engine = create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    await create_catalog_tables(engine)
    try:
        search = SchemaSearch(session_factory(engine), sources)
        refunds = await search.search("上个月会员退款金额按渠道", ["shop", "archive"], limit=1)
        [hit] = refunds.tables
        assert (hit.source, hit.name.split(".")[1], hit.comment, hit.row_count) == ("shop", "member_refunds", "会员退款记录", 2)
        columns = [(c.name, c.comment, c.values) for c in hit.columns]
        assert columns[:2] == [("id", None, None), ("channel", "渠道", ["app", "web"])]
        rates = await search.search("USD exchange rate", ["shop", "archive"], limit=1)
        [fx] = rates.tables
        assert (fx.source, fx.name, fx.row_count) == ("archive", "finance.fx_rates", 2)
        assert json.loads(fx.model_dump_json())["columns"][1]["values"] == ["EUR", "USD"]
    finally:
        await engine.dispose()
