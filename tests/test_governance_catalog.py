"""`search_schema` under the access policy: the catalog holds sample values of low-cardinality
columns and row counts, read with the source's own rights. A hidden column (its name and its
values) is shown only to those who may read it; a row-filtered table shows no sample values and
no row count unless its audience sees every row; a closed source is never searched; and no
question finds a table by a value its asker may not see. On a DuckDB source."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from agent_core.catalog.store import create_catalog_tables
from agent_core.config import AgentConfig
from agent_core.data.source_config import DataSourceConfig
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.tools.schema_tools import SearchSchemaInput, SearchSchemaTool, search_schema_tool
from tests.policies import sales_policy

POLICY = sales_policy(
    hidden_columns=["customer_email", "Margin_Band"],
    granted_columns=["customer_email", "margin_band"],
    hr_source=True,
    channels={"slack:C0FIN": "finance", "slack:C0SALES": "east_sales"},
)
# Low-cardinality text: the catalog keeps every distinct value of each of these columns.
ORDERS = [
    (1, "East", "amy@secret.example", "thin", "retail", 100.0),
    (2, "West", "wes@secret.example", "fat", "retail", 7000.0),
    (3, "Atlantis", "zed@secret.example", "fat", "wholesale", 5.0),
]


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, DataSourceConfig]:
    dwh, hr = tmp_path / "dwh.duckdb", tmp_path / "hr.duckdb"
    with duckdb.connect(str(dwh)) as conn:
        conn.execute(
            "CREATE TABLE orders (id INTEGER, region VARCHAR, customer_email VARCHAR, margin_band VARCHAR, "
            "segment VARCHAR, amount DOUBLE)"
        )
        conn.execute("COMMENT ON TABLE orders IS 'Sales orders by region'")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?)", ORDERS)
        conn.execute("CREATE TABLE products (id INTEGER, category VARCHAR)")
        conn.execute("COMMENT ON TABLE products IS 'Product catalogue by category'")
        conn.executemany("INSERT INTO products VALUES (?, ?)", [(1, "toys"), (2, "garden")])
    with duckdb.connect(str(hr)) as conn:
        conn.execute("CREATE TABLE salaries (id INTEGER, grade VARCHAR, pay DOUBLE)")
        conn.execute("COMMENT ON TABLE salaries IS 'Salaries by grade'")
        conn.executemany("INSERT INTO salaries VALUES (?, ?, ?)", [(1, "senior", 9.0), (2, "junior", 5.0)])
    return {
        "dwh": DataSourceConfig(name="dwh", url=f"duckdb:///{dwh}"),
        "hr": DataSourceConfig(name="hr", url=f"duckdb:///{hr}"),
    }


@asynccontextmanager
async def search_tool(
    sources: dict[str, DataSourceConfig], tmp_path: Path, policy_text: str = POLICY
) -> AsyncIterator[SearchSchemaTool]:
    policy = tmp_path / "access.yaml"
    policy.write_text(policy_text)
    config = AgentConfig(model="m", data_dir=tmp_path, datasources=sources, access_policy=policy)
    engine = create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    await create_catalog_tables(engine)
    try:
        yield search_schema_tool(config, session_factory(engine))
    finally:
        await engine.dispose()


@pytest.fixture
async def tool(sources: dict[str, DataSourceConfig], tmp_path: Path) -> AsyncIterator[SearchSchemaTool]:
    async with search_tool(sources, tmp_path) as searching:
        yield searching


def person(tmp_path: Path, user: str, channel: str | None = None, *, report: bool = False) -> RunContext:
    return RunContext(
        thread_id=f"slack:T1:{channel or 'D1'}:1.1",
        data_dir=tmp_path,
        channel=channel or "D1",
        user=user,
        is_dm=channel is None,
        chat=ChatOrigin(platform="slack", workspace="T1"),
        scheduled_run="report:3" if report else None,
    )


async def search(tool: SearchSchemaTool, ctx: RunContext, question: str, limit: int = 5) -> dict[str, Any]:
    result: dict[str, Any] = await tool.run(SearchSchemaInput(question=question, limit=limit), ctx)
    return result


def table(found: dict[str, Any], name: str) -> dict[str, Any]:
    [hit] = [t for t in found["tables"] if t["name"].split(".")[-1] == name]
    return hit


def columns(hit: dict[str, Any]) -> dict[str, list[str] | None]:
    return {c["name"]: c.get("values") for c in hit["columns"]}


async def test_finance_in_a_dm_sees_every_column_value_and_the_row_count(tool: SearchSchemaTool, tmp_path: Path) -> None:
    orders = table(await search(tool, person(tmp_path, "U02FIN"), "sales orders by region"), "orders")
    shown = columns(orders)
    assert shown["customer_email"] == ["amy@secret.example", "wes@secret.example", "zed@secret.example"]
    assert shown["region"] == ["Atlantis", "East", "West"] and orders["row_count"] == 3


async def test_an_east_seller_sees_no_hidden_column_and_no_values_of_filtered_rows(
    tool: SearchSchemaTool, tmp_path: Path
) -> None:
    found = await search(tool, person(tmp_path, "U01EAST"), "sales orders by region segment")
    orders = table(found, "orders")
    shown = columns(orders)
    assert set(shown) == {"id", "region", "segment", "amount"}  # hidden: gone, name and all
    assert shown["region"] is None and shown["segment"] is None  # West and Atlantis are not East's
    assert "row_count" not in orders  # the count of every row is not East's either
    text = json.dumps(found)
    for secret in ("secret.example", "customer_email", "margin_band", "West", "Atlantis", "wholesale"):
        assert secret not in text
    # A table the policy does not protect keeps its values.
    products = table(await search(tool, person(tmp_path, "U01EAST"), "product category"), "products")
    assert columns(products)["category"] == ["garden", "toys"] and products["row_count"] == 2


async def test_a_channel_shows_what_default_may_see_and_a_configured_channel_its_group(
    tool: SearchSchemaTool, tmp_path: Path
) -> None:
    general = table(await search(tool, person(tmp_path, "U02FIN", "C0GENERAL"), "sales orders by region"), "orders")
    assert "customer_email" not in columns(general) and columns(general)["region"] is None
    finance_channel = table(await search(tool, person(tmp_path, "U01EAST", "C0FIN"), "sales orders by region"), "orders")
    assert columns(finance_channel)["customer_email"] == ["amy@secret.example", "wes@secret.example", "zed@secret.example"]


async def test_a_scheduled_report_sees_only_what_creator_and_channel_both_may(tool: SearchSchemaTool, tmp_path: Path) -> None:
    """An East seller's report posted to the finance channel: finance may, the creator may not."""
    found = await search(tool, person(tmp_path, "U01EAST", "C0FIN", report=True), "sales orders by region")
    shown = columns(table(found, "orders"))
    assert "customer_email" not in shown and shown["region"] is None
    assert "secret.example" not in json.dumps(found)


@pytest.mark.parametrize(
    "question",
    [
        "amy@secret.example",  # a hidden column's value
        "wes secret example",  # its words, split as the index splits them
        "Atlantis",  # a value of a row the asker may not see
        "wholesale",  # another column's value, only on filtered rows
        "fat margin band",  # a hidden column's name and values
        "customer email",
    ],
)
async def test_no_question_finds_a_table_by_what_its_asker_may_not_see(
    tool: SearchSchemaTool, tmp_path: Path, question: str
) -> None:
    """Search itself must not rank by protected values: a hit would confirm the value exists."""
    found = await search(tool, person(tmp_path, "U01EAST"), question)
    assert all(t["name"].split(".")[-1] != "orders" for t in found["tables"]), found["tables"]
    assert "secret.example" not in json.dumps(found)


async def test_a_closed_source_is_never_searched(tool: SearchSchemaTool, tmp_path: Path) -> None:
    east = await search(tool, person(tmp_path, "U01EAST"), "salaries by grade")
    assert all(t["source"] != "hr" for t in east["tables"]) and "senior" not in json.dumps(east)
    finance = await search(tool, person(tmp_path, "U02FIN"), "salaries by grade")
    assert table(finance, "salaries")["source"] == "hr"


@pytest.mark.parametrize("policy_name", ["ORDERS", "main.orders", "Main.Orders"])
@pytest.mark.parametrize("column_name", ["CUSTOMER_EMAIL", "customer_email"])
async def test_the_policys_spelling_of_a_table_or_column_protects_it_alike(
    sources: dict[str, DataSourceConfig], tmp_path: Path, policy_name: str, column_name: str
) -> None:
    text = POLICY.replace("      orders:", f"      {policy_name}:").replace(
        "hidden_columns: [customer_email,", f"hidden_columns: [{column_name},"
    )
    async with search_tool(sources, tmp_path, text) as searching:
        found = await search(searching, person(tmp_path, "U01EAST"), "sales orders by region")
        probe = await search(searching, person(tmp_path, "U01EAST"), "amy@secret.example Atlantis")
    shown = columns(table(found, "orders"))
    assert "customer_email" not in shown and shown["region"] is None
    assert all(t["name"].split(".")[-1] != "orders" for t in probe["tables"])
