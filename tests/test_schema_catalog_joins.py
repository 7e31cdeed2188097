"""`search_schema` returns the tables a multi-table question needs and how they join: the link
table no word of the question names, with the join keys, whether the warehouse declares its
foreign keys or not; also through `ba-agent tool run search_schema`. Verified examples lend
their questions' words to the tables they read."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core.catalog.examples import VerifiedExample
from agent_core.catalog.models import CatalogColumn, CatalogTable
from agent_core.catalog.refresh import refresh_catalog
from agent_core.catalog.search import SchemaIndex, SchemaSearch
from agent_core.catalog.store import create_catalog_tables
from agent_core.data.source_config import DataSourceConfig
from agent_core.store.db import create_engine, session_factory
from tests.schema_catalog_warehouse import Table, generated_tables, warehouse
from tests.serve_process import BA_AGENT, clean_env
from tests.test_sources import _ensure_server, _start_postgres_command
from tests.waiting import scaled

# A school's pets: which students own which pets goes through has_pet, which no question names.
SCHOOL = [
    Table("student", "Students of the school",
          [("stu_id", "integer", None), ("first_name", "text", None), ("last_name", "text", None), ("major", "text", None)]),
    Table("pets", None, [("pet_id", "integer", None), ("pet_type", "text", "dog, cat…"), ("weight", "numeric", None)]),
    Table("has_pet", None, [("stu_id", "integer", None), ("pet_id", "integer", None)]),
    Table("dorm", "Dormitories", [("dorm_id", "integer", None), ("dorm_name", "text", None), ("capacity", "integer", None)]),
]  # fmt: skip
FOREIGN_KEYS = [
    "ALTER TABLE {schema}.student ADD PRIMARY KEY (stu_id)",
    "ALTER TABLE {schema}.pets ADD PRIMARY KEY (pet_id)",
    "ALTER TABLE {schema}.has_pet ADD FOREIGN KEY (stu_id) REFERENCES {schema}.student (stu_id)",
    "ALTER TABLE {schema}.has_pet ADD FOREIGN KEY (pet_id) REFERENCES {schema}.pets (pet_id)",
]
QUESTION = "first names of students who own a pet heavier than 10 kg"


@pytest.fixture(scope="module", params=["declared", "undeclared"])
def school(request: pytest.FixtureRequest) -> Iterator[tuple[DataSourceConfig, str, bool]]:
    """The school among 100 look-alike tables, with its foreign keys declared or not."""
    _ensure_server(5432, _start_postgres_command())
    declared = request.param == "declared"
    with warehouse(generated_tables(100) + SCHOOL, constraints=FOREIGN_KEYS if declared else ()) as wh:
        yield DataSourceConfig(name="dwh", url=wh.url), wh.schema, declared


async def test_a_multi_table_question_gets_the_link_table_and_the_join_keys(
    school: tuple[DataSourceConfig, str, bool], tmp_path: Path
) -> None:
    source, schema, declared = school
    engine = create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    await create_catalog_tables(engine)
    try:
        sessions = session_factory(engine)
        await refresh_catalog({"dwh": source}, sessions)
        result = await SchemaSearch(sessions, {"dwh": source}).search(QUESTION, ["dwh"], limit=5)
    finally:
        await engine.dispose()
    names = [hit.name for hit in result.tables]
    assert {f"{schema}.student", f"{schema}.pets", f"{schema}.has_pet"} <= set(names[:3]), names
    group = result.groups[0]
    assert set(group.tables) == {f"{schema}.student", f"{schema}.pets", f"{schema}.has_pet"}
    assert {_sides(join) for join in group.joins} == {
        _sides(f"{schema}.has_pet.stu_id = {schema}.student.stu_id"),
        _sides(f"{schema}.has_pet.pet_id = {schema}.pets.pet_id"),
    }
    link = result.tables[names.index(f"{schema}.has_pet")]
    assert {(j.table, j.declared) for j in link.joins} == {(f"{schema}.student", declared), (f"{schema}.pets", declared)}
    assert {j.on for j in link.joins} == {
        f"{schema}.has_pet.stu_id = {schema}.student.stu_id",
        f"{schema}.has_pet.pet_id = {schema}.pets.pet_id",
    }


def _sides(condition: str) -> frozenset[str]:
    """A join condition either way round."""
    return frozenset(condition.split(" = "))


def test_tool_run_search_schema_answers_with_tables_and_joins(school: tuple[DataSourceConfig, str, bool], tmp_path: Path) -> None:
    source, schema, _ = school
    env = clean_env(tmp_path, BA_DATASOURCES=json.dumps({"dwh": source.url}), DATABASE_URL=f"sqlite:///{tmp_path / 'service.db'}")
    ran = subprocess.run(
        [BA_AGENT, "tool", "run", "search_schema", "--json", json.dumps({"question": QUESTION, "limit": 3})],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    assert {t["name"] for t in answer["tables"]} == {f"{schema}.student", f"{schema}.pets", f"{schema}.has_pet"}
    assert len(answer["groups"][0]["joins"]) == 2


def test_a_verified_example_lends_its_words_to_the_tables_its_sql_reads() -> None:
    """Nothing in ``cust_attr_m`` says churn; the operator's verified example does."""
    tables = [
        CatalogTable(
            source="dwh", schema_name="mart", name=name, kind="table",
            columns=[CatalogColumn(name=c, type="text") for c in columns],
        )
        for name, columns in [
            ("cust_attr_m", ["cust_id", "seg_cd", "lost_flg", "month"]),
            ("customer_segments", ["segment_code", "segment_name"]),
            ("monthly_orders", ["order_id", "month", "amount"]),
        ]
    ]  # fmt: skip
    example = VerifiedExample(
        question="Monthly churn rate by customer segment",
        sql="SELECT month, seg_cd, AVG(lost_flg::int) FROM mart.cust_attr_m GROUP BY 1, 2",
        source="dwh",
    )
    without = SchemaIndex(tables, [], []).search("customer churn by segment", ["dwh"], 3)
    assert without.tables[0].name != "mart.cust_attr_m"
    found = SchemaIndex(tables, [example], []).search("customer churn by segment", ["dwh"], 3)
    assert found.tables[0].name == "mart.cust_attr_m"
    assert [e.question for e in found.examples] == ["Monthly churn rate by customer segment"]


def test_a_column_named_after_a_table_joins_that_tables_key() -> None:
    """No key declared: ``countrylanguage.CountryCode`` is ``country.Code``, ``city.CountryCode`` too."""
    columns = {
        "country": [("Code", "text"), ("Name", "text"), ("Continent", "text"), ("Population", "integer")],
        "countrylanguage": [("CountryCode", "text"), ("Language", "text"), ("IsOfficial", "text")],
        "city": [("ID", "integer"), ("Name", "text"), ("CountryCode", "text"), ("Population", "integer")],
    }
    tables = [
        CatalogTable(source="dwh", schema_name="world", name=name, kind="table",
                     columns=[CatalogColumn(name=c, type=t) for c, t in cols])
        for name, cols in columns.items()
    ]  # fmt: skip
    result = SchemaIndex(tables, [], []).search("official languages of countries and their cities", ["dwh"], 3)
    joins = {hit.name: {(j.table, j.on, j.declared) for j in hit.joins} for hit in result.tables}
    language = ("world.country", 'world.countrylanguage."CountryCode" = world.country."Code"', False)
    assert language in joins["world.countrylanguage"]
    assert ("world.country", 'world.city."CountryCode" = world.country."Code"', False) in joins["world.city"]
