"""The row filter as a barrier, on real PostgreSQL, MariaDB and DuckDB databases.

An East seller's filter hides the West rows of ``orders``, and the hidden rows hold values that
trip casts, overflows and domain errors (a negative amount, a huge one, a zero, codes that are
not numbers). Each attempt runs twice: through the policy against ``orders``, and as written
against ``east_orders``, a table holding only the East rows. The two must behave alike -- the
same rows, or an error of the same class -- wherever the attempt puts its expression: SELECT,
WHERE, JOIN ON, ORDER BY, GROUP BY, HAVING, a window frame, a scalar or correlated subquery,
LATERAL, a set operation, a CTE of the user's own. The hidden rows might as well not exist.

Besides: the database evaluates the user's expressions only on the allowed rows (the plans,
with their row counts, say which rows each expression saw: a timing oracle without timing),
delays are refused, error texts carry no values from rows, the catalog keeps a hidden column's
default and (for a filtered audience) row counts, odd syntax gives a typed refusal, and all of
it holds through ``ba-agent tool run sql_query --platform slack --user …``. Push-down tools'
queries are audited under the tool's own name.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core.config import AgentConfig
from agent_core.data.errors import DataError
from agent_core.data.source_config import DataSourceConfig
from agent_core.data.sources import query_source
from agent_core.data.sql_guard import ensure_read_only
from agent_core.governance.access import SourceAccess, governed_source_query
from agent_core.governance.audience import Identity
from agent_core.governance.audit import AuditTrail, read_audit
from agent_core.governance.columns import SourceColumns
from agent_core.governance.enforce import enforce
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.analytics_tools import AttributeChangeTool, DetectAnomaliesTool
from tests.policies import sales_policy
from tests.readonly_warehouse import mariadb_readonly, postgres_readonly
from tests.serve_process import BA_AGENT, clean_env
from tests.test_semantic import build_duckdb, write_warehouse_yaml
from tests.test_sources import PG_URL
from tests.waiting import scaled

EAST = [
    (1, "East", "11", "e1@secret.example", "10.00"),
    (2, "East", "12", "e2@secret.example", "20.50"),
    (3, "East", "13", "e3@secret.example", "30.25"),
]
# Each trips something on a row the East seller may not see: a cast of a code that is no
# number, a negative amount (square root, logarithm), a huge one (overflow), a zero (division).
TRAPS = [
    (4, "West", "EAST-123|99", "w4@secret.example", "-5.00"),
    (5, "West", "98765", "w5@secret.example", "98765432.10"),
    (6, "West", "x", "w6@secret.example", "0.00"),
]
# Plain hidden rows, so that a plan that reads them shows in its row counts.
FILLER = [(i, "West", "7", f"w{i}@secret.example", "1.00") for i in range(7, 207)]
ROWS = EAST + TRAPS + FILLER
SECRET_DEFAULT = "top-secret-note"  # the default of a hidden column added after the rows
# Any of these in an answer or an error text is a leak (unless the query itself wrote it).
PROTECTED_MARKERS = ("EAST-123", "98765", "@secret", SECRET_DEFAULT, "-5.00", "West")

POLICY_YAML = sales_policy(hidden_columns=["customer_email", "secret_note"])
EAST_DM = Identity(platform="slack", user="U01EAST", is_dm=True)
FINANCE_DM = Identity(platform="slack", user="U02FIN", is_dm=True)


@dataclass
class Warehouse:
    dialect: str  # sqlglot's: postgres, mysql, duckdb
    source: DataSourceConfig
    columns: SourceColumns
    explain: Callable[..., Any]  # the plan of a query, with the row counts it ran with

    def governed(self, sql: str, identity: Identity, policy: AccessPolicy) -> Any:
        return governed_source_query(self.source, sql, identity, policy, self.columns, row_cap=1000)


# --- the warehouses --------------------------------------------------------------------------


def _postgres_fill(conn: psycopg.Connection, schema: str) -> None:
    conn.execute(
        f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, region text, code text, "
        "customer_email text, amount numeric(12, 2))"
    )
    conn.execute(
        f"CREATE TABLE {schema}.east_orders (id int PRIMARY KEY, region text, code text, amount numeric(12, 2))"
    )
    conn.execute(f"CREATE TABLE {schema}.customers (id int, name text)")
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {schema}.orders VALUES (%s, %s, %s, %s, %s)", ROWS)
        cur.executemany(
            f"INSERT INTO {schema}.east_orders VALUES (%s, %s, %s, %s)", [(i, r, c, a) for i, r, c, _, a in EAST]
        )
        cur.executemany(f"INSERT INTO {schema}.customers VALUES (%s, %s)", [(i, f"c{i}") for i in range(1, 7)])
    # Added with a default after the rows: PostgreSQL keeps it in pg_attribute.attmissingval.
    conn.execute(f"ALTER TABLE {schema}.orders ADD COLUMN secret_note text DEFAULT '{SECRET_DEFAULT}'")
    conn.execute(f"ANALYZE {schema}.orders")


def _mariadb_fill(cur: Any, database: str) -> None:
    cur.execute(
        f"CREATE TABLE {database}.orders (id INT PRIMARY KEY, region VARCHAR(20), code VARCHAR(40), "
        "customer_email VARCHAR(80), amount DECIMAL(12, 2))"
    )
    cur.execute(
        f"CREATE TABLE {database}.east_orders (id INT PRIMARY KEY, region VARCHAR(20), code VARCHAR(40), "
        "amount DECIMAL(12, 2))"
    )
    cur.execute(f"CREATE TABLE {database}.customers (id INT, name VARCHAR(20))")
    cur.executemany(f"INSERT INTO {database}.orders VALUES (%s, %s, %s, %s, %s)", ROWS)
    cur.executemany(
        f"INSERT INTO {database}.east_orders VALUES (%s, %s, %s, %s)", [(i, r, c, a) for i, r, c, _, a in EAST]
    )
    cur.executemany(f"INSERT INTO {database}.customers VALUES (%s, %s)", [(i, f"c{i}") for i in range(1, 7)])
    cur.execute(f"ALTER TABLE {database}.orders ADD COLUMN secret_note VARCHAR(40) DEFAULT '{SECRET_DEFAULT}'")
    cur.execute(f"ANALYZE TABLE {database}.orders")


def _duckdb_fill(path: Path) -> None:
    with duckdb.connect(str(path)) as conn:
        conn.execute(
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, region VARCHAR, code VARCHAR, "
            "customer_email VARCHAR, amount DECIMAL(12, 2))"
        )
        conn.execute(
            "CREATE TABLE east_orders (id INTEGER PRIMARY KEY, region VARCHAR, code VARCHAR, amount DECIMAL(12, 2))"
        )
        conn.execute("CREATE TABLE customers (id INTEGER, name VARCHAR)")
        conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", ROWS)
        conn.executemany("INSERT INTO east_orders VALUES (?, ?, ?, ?)", [(i, r, c, a) for i, r, c, _, a in EAST])
        conn.executemany("INSERT INTO customers VALUES (?, ?)", [(i, f"c{i}") for i in range(1, 7)])
        conn.execute(f"ALTER TABLE orders ADD COLUMN secret_note VARCHAR DEFAULT '{SECRET_DEFAULT}'")


def _postgres() -> Iterator[Warehouse]:
    with postgres_readonly("barrier", _postgres_fill) as (url, schema):

        def explain(sql: str, prefer_index: bool = False) -> Any:
            with psycopg.connect(PG_URL) as conn:
                conn.execute(f"SET search_path = {schema}")
                if prefer_index:  # the test table is small enough for a scan to be cheaper
                    conn.execute("SET enable_seqscan = off")
                return conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}").fetchone()[0]  # type: ignore[index]

        yield Warehouse("postgres", DataSourceConfig(name="dwh", url=url, statement_timeout_s=10), SourceColumns(), explain)


def _mariadb() -> Iterator[Warehouse]:
    with mariadb_readonly("barrier", _mariadb_fill) as (url, database):

        def explain(sql: str, prefer_index: bool = False) -> Any:
            conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", database=database)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"ANALYZE FORMAT=JSON {sql}")
                    return json.loads(cur.fetchone()[0])
            finally:
                conn.close()

        yield Warehouse("mysql", DataSourceConfig(name="dwh", url=url, statement_timeout_s=10), SourceColumns(), explain)


def _duckdb(tmp: Path) -> Iterator[Warehouse]:
    path = tmp / "warehouse.duckdb"
    _duckdb_fill(path)

    def explain(sql: str) -> Any:
        with duckdb.connect(str(path), read_only=True) as conn:
            return json.loads(conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}").fetchall()[0][1])

    yield Warehouse("duckdb", DataSourceConfig(name="dwh", url=f"duckdb://{path}"), SourceColumns(), explain)


@pytest.fixture(scope="module", params=["postgres", "mysql", "duckdb"])
def warehouse(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Warehouse]:
    if request.param == "postgres":
        yield from _postgres()
    elif request.param == "mysql":
        yield from _mariadb()
    else:
        yield from _duckdb(tmp_path_factory.mktemp("barrier"))


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> AccessPolicy:
    path = tmp_path_factory.mktemp("policy") / "access.yaml"
    path.write_text(POLICY_YAML)
    return load_policy(path)


# --- error oracles ---------------------------------------------------------------------------

# Expressions that succeed on every East row and fail on some hidden row, per engine.
TRAP_EXPRESSIONS = {
    "postgres": {
        "cast_int2": "amount::int2",
        "sqrt_negative": "sqrt(amount)",
        "cast_numeric_4_0": "amount::numeric(4, 0)",
        "cast_code_int": "code::int",
        "cast_code_regclass": "code::regclass::text",
        "ln_negative_or_zero": "ln(amount)",
        "division_by_zero": "1 / amount",
        "exp_overflow": "exp(amount)",
        "case_conditional_error": "CASE WHEN amount < 0 THEN sqrt(amount) ELSE 0 END",
    },
    "mysql": {
        "exp_overflow": "EXP(amount)",
        "if_hidden_amount": "IF(amount >= 98765, EXP(1000), 1)",
        "pow_overflow": "POW(amount, 40)",
        "unsigned_overflow": "~0 + (amount < 0)",
        "if_hidden_region": "IF(region = 'West', EXP(1000), 1)",
        "case_conditional_error": "CASE WHEN amount < 0 THEN ~0 + (amount < 0) ELSE 0 END",
        "cast_signed": "CAST(code AS SIGNED)",
    },
    "duckdb": {
        "cast_code_int": "code::int",
        "integer_division_by_zero": "1 // amount::int",
        "cast_int2": "amount::int2",
        "cast_decimal_4_0": "amount::decimal(4, 0)",
        "multiplication_overflow": "amount::int * 10000000",
        "case_conditional_error": "CASE WHEN amount < 0 THEN code::int ELSE 0 END",
    },
}
# Where an expression can stand; {e} the expression, {t} the table. Every expression is tried
# in each clause; the query shapes after them with the first two expressions of each engine.
CLAUSES = {
    "select": "SELECT id, {e} AS v FROM {t}",
    "where": "SELECT count(*) FROM {t} WHERE {e} IS NOT NULL",
    "join_on": "SELECT count(*) FROM customers c JOIN {t} o ON o.id = c.id AND {e} IS NOT NULL",
    "order_by": "SELECT id FROM {t} ORDER BY {e}, id",
    "group_by": "SELECT count(*) FROM {t} GROUP BY {e}",
    "having": "SELECT region FROM {t} GROUP BY region HAVING count({e}) > 0",
    "window_frame": "SELECT id, count({e}) OVER (ORDER BY id ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM {t}",
}
SHAPES = {
    "beside_comparisons": "SELECT count(*) FROM {t} WHERE id > 0 AND code <> 'x' AND {e} IS NOT NULL AND region = 'East'",
    "window_order": "SELECT id, row_number() OVER (ORDER BY {e}, id) FROM {t}",
    "scalar_subquery": "SELECT (SELECT count({e}) FROM {t}) AS n",
    "correlated_exists": (
        "SELECT count(*) FROM customers c WHERE EXISTS (SELECT 1 FROM {t} o WHERE o.id = c.id AND {e} IS NOT NULL)"
    ),
    "in_subquery": "SELECT count(*) FROM customers WHERE id IN (SELECT id FROM {t} WHERE {e} IS NOT NULL)",
    "user_cte": "WITH x AS (SELECT * FROM {t}) SELECT count(*) FROM x WHERE {e} IS NOT NULL",
    "union": "SELECT count(*) FROM (SELECT {e} AS v FROM {t} UNION ALL SELECT {e} AS v FROM {t}) u",
    "lateral": "SELECT count(*) FROM customers c, LATERAL (SELECT 1 AS k FROM {t} o WHERE o.id = c.id AND {e} IS NOT NULL) x",
}
NO_LATERAL = {"mysql"}  # MariaDB 10.11 has no LATERAL
# Controls: the allowed rows fail too, so both sides must fail alike.
BOTH_FAIL = {
    "postgres": "SELECT count(*) FROM {t} WHERE amount::numeric(1, 0) IS NOT NULL",
    "mysql": "SELECT count(*) FROM {t} WHERE EXP(amount * 100) IS NOT NULL",
    "duckdb": "SELECT count(*) FROM {t} WHERE amount::decimal(1, 0) IS NOT NULL",
}


def _oracle_cases() -> list[Any]:
    cases = []
    for dialect, expressions in TRAP_EXPRESSIONS.items():
        for index, (name, expression) in enumerate(expressions.items()):
            places = {**CLAUSES, **SHAPES} if index < 2 else CLAUSES
            for place, template in places.items():
                if place == "lateral" and dialect in NO_LATERAL:
                    continue
                sql = template.replace("{e}", expression)
                cases.append(pytest.param(dialect, sql, id=f"{dialect}-{name}-{place}"))
        cases.append(pytest.param(dialect, BOTH_FAIL[dialect], id=f"{dialect}-both_fail"))
    return cases


def _error_class(dialect: str, message: str) -> str:
    pattern = {
        "postgres": r"SQLSTATE (\w+)",
        "mysql": r"MySQL error (\d+)",
        "duckdb": r"DuckDB error: ([A-Za-z ]+ Error)",
    }[dialect]
    found = re.search(pattern, message)
    assert found, f"no error class in {message!r}"
    return found.group(1)


def _outcome(run: Callable[[], Any], dialect: str) -> tuple[str, Any]:
    try:
        result = run()
    except DataError as error:
        return "error", _error_class(dialect, str(error))
    return "rows", sorted(json.dumps(row, default=str) for row in result.rows)


def _assert_no_protected_value(text: str, sql: str) -> None:
    for marker in PROTECTED_MARKERS:
        if marker not in sql:
            assert marker not in text, f"protected value {marker!r} shows: {text[:300]}"


@pytest.mark.parametrize(("warehouse", "sql"), _oracle_cases(), indirect=["warehouse"])
def test_hidden_rows_change_no_answer_and_no_error(warehouse: Warehouse, sql: str, policy: AccessPolicy) -> None:
    governed = _outcome(lambda: warehouse.governed(sql.format(t="orders"), EAST_DM, policy), warehouse.dialect)
    reference = _outcome(lambda: query_source(warehouse.source, sql.format(t="east_orders")), warehouse.dialect)
    assert governed == reference, f"as East seller: {governed}; with only the East rows: {reference}"


@pytest.mark.parametrize("warehouse", ["postgres", "mysql", "duckdb"], indirect=True)
def test_allowed_totals_stay_right(warehouse: Warehouse, policy: AccessPolicy) -> None:
    sql = "SELECT region, sum(amount), count(*) FROM orders GROUP BY region"
    east = warehouse.governed(sql, EAST_DM, policy)
    assert [(r[0], float(r[1]), int(r[2])) for r in east.rows] == [("East", 60.75, 3)]
    everything = warehouse.governed(sql + " ORDER BY region", FINANCE_DM, policy)
    west_total = sum(float(amount) for _, region, _, _, amount in ROWS if region == "West")
    assert [(r[0], round(float(r[1]), 2), int(r[2])) for r in everything.rows] == [
        ("East", 60.75, 3),
        ("West", round(west_total, 2), len(ROWS) - 3),
    ]
    assert everything.access_note is None


# --- timing oracles --------------------------------------------------------------------------

# An expression the planner would happily evaluate early, and how it shows in the plan.
HEAVY = {
    "postgres": ("length(repeat(code, 1000)) > 0", "repeat("),
    "mysql": ("LENGTH(REPEAT(code, 1000)) > 0", "repeat("),
    "duckdb": ("code LIKE '%1%'", "contains(code"),
}


def _postgres_inputs(plan: Any, marker: str) -> list[float]:
    """Rows that reached each plan node filtering with the marked expression."""
    found = []
    nodes = [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        for key, removed in (("Filter", "Rows Removed by Filter"), ("Join Filter", "Rows Removed by Join Filter")):
            if marker in node.get(key, ""):
                found.append((node["Actual Rows"] + node.get(removed, 0)) * node["Actual Loops"])
    return found


def _mariadb_inputs(plan: Any, marker: str) -> list[float]:
    found = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if marker in str(node.get("attached_condition", "")).lower():
                found.append(float(node["r_rows"]) * float(node.get("r_loops", 1)))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _duckdb_inputs(plan: Any, marker: str) -> list[float]:
    found = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        stack.extend(value for key, value in node.items() if key != "extra_info")
        if "children" in node and "name" in node and marker in json.dumps(node.get("extra_info")):
            if "SCAN" in node["name"]:
                found.append(float(len(ROWS)))  # a scan filters every row of its table
            else:
                found.append(float(sum(child["intermediate_rows"] for child in node["children"])))
    return found


@pytest.mark.parametrize("warehouse", ["postgres", "mysql", "duckdb"], indirect=True)
def test_user_expressions_run_only_on_allowed_rows(warehouse: Warehouse, policy: AccessPolicy) -> None:
    """A costly expression costs per allowed row, not per hidden row: its plan node sees 3 rows
    of the 206 (counted by the database, not timed)."""
    expression, marker = HEAVY[warehouse.dialect]
    result = warehouse.governed(f"SELECT count(*) FROM orders WHERE {expression}", EAST_DM, policy)
    assert result.rows[0][0] == len(EAST)
    inputs = {
        "postgres": _postgres_inputs,
        "mysql": _mariadb_inputs,
        "duckdb": _duckdb_inputs,
    }[warehouse.dialect](warehouse.explain(result.sql), marker)
    assert inputs, f"{marker} not found in the plan of {result.sql}"
    assert inputs == [len(EAST)] * len(inputs), f"rows seen by {expression}: {inputs}"


INDEX_USE = {"postgres": "Index Cond", "mysql": '"key": "PRIMARY"'}


@pytest.mark.parametrize("warehouse", ["postgres", "mysql"], indirect=True)
def test_a_lookup_still_uses_the_index(warehouse: Warehouse, policy: AccessPolicy) -> None:
    """Comparisons with literals cannot fail or take time by row, so they cross the fence too."""
    result = warehouse.governed("SELECT id, amount FROM orders WHERE id = 2 AND code <> 'x'", EAST_DM, policy)
    assert [(r[0], float(r[1])) for r in result.rows] == [(2, 20.5)]
    plan = json.dumps(warehouse.explain(result.sql, prefer_index=True))
    assert INDEX_USE[warehouse.dialect] in plan, plan
    hidden = warehouse.governed("SELECT count(*) FROM orders WHERE id = 4 OR code = 'EAST-123|99'", EAST_DM, policy)
    assert hidden.rows == [[0]]


@pytest.mark.parametrize(
    ("dialect", "sql"),
    [
        ("postgres", "SELECT count(*) FROM orders WHERE pg_sleep(0.02) IS NOT NULL"),
        ("postgres", "SELECT pg_sleep_for('1 second')"),
        ("postgres", "SELECT pg_sleep_until(now())"),
        ("mysql", "SELECT count(*) FROM orders WHERE SLEEP(0.02) = 0"),
        ("mysql", "SELECT BENCHMARK(1000000, MD5(code)) FROM orders"),
    ],
)
def test_delays_are_refused(dialect: str, sql: str) -> None:
    with pytest.raises(DataError, match="not allowed"):
        ensure_read_only(sql, dialect)


# --- error texts -----------------------------------------------------------------------------

CAST_ERROR = {
    "postgres": ("SELECT CAST(code || '|' || amount AS int) FROM orders ORDER BY id", "22P02"),
    "mysql": ("SELECT EXP(amount * 1000) FROM orders ORDER BY id", "1690"),
    "duckdb": ("SELECT CAST(code || '|' || amount AS INTEGER) FROM orders ORDER BY id", "Conversion Error"),
}


@pytest.mark.parametrize("warehouse", ["postgres", "mysql", "duckdb"], indirect=True)
def test_error_texts_carry_no_row_values(warehouse: Warehouse, policy: AccessPolicy) -> None:
    sql, error_class = CAST_ERROR[warehouse.dialect]
    for identity in (EAST_DM, FINANCE_DM):
        with pytest.raises(DataError) as failed:
            warehouse.governed(sql, identity, policy)
        message = str(failed.value)
        assert _error_class(warehouse.dialect, message) == error_class
        for value in ("11|10.00", "11", "10.00", "10000", "EAST-123", "98765"):
            assert value not in message, f"{value!r} shows in {message!r}"
    # What the user wrote stays, so the model can fix its query.
    with pytest.raises(DataError, match="amont"):
        warehouse.governed("SELECT amont FROM orders", EAST_DM, policy)


# --- the catalog -----------------------------------------------------------------------------


@pytest.mark.parametrize("warehouse", ["postgres"], indirect=True)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT attname, attmissingval::text FROM pg_attribute WHERE attrelid = 'orders'::regclass AND atthasmissing",
        "SELECT * FROM pg_catalog.pg_attribute WHERE attrelid = 'orders'::regclass",
        "SELECT a::text FROM pg_attribute a WHERE attrelid = 'orders'::regclass",
        "SELECT row_to_json(a)::text FROM pg_attribute AS a WHERE a.attrelid = 'orders'::regclass",
        "SELECT to_jsonb(pg_attribute)::text FROM pg_attribute WHERE attrelid = 'orders'::regclass",
        "SELECT x.* FROM (SELECT * FROM pg_attribute) x WHERE attrelid = 'orders'::regclass",
        "WITH pa AS (SELECT * FROM pg_attribute) SELECT pa::text FROM pa",
        "SELECT most_common_vals::text, histogram_bounds::text FROM pg_stats WHERE tablename = 'orders'",
    ],
)
def test_catalog_keeps_a_hidden_columns_default(warehouse: Warehouse, policy: AccessPolicy, sql: str) -> None:
    for identity in (EAST_DM, FINANCE_DM):  # finance may read the column, not the catalog's copy
        try:
            result = warehouse.governed(sql, identity, policy)
        except DataError as refused:
            assert SECRET_DEFAULT not in str(refused)
            continue
        assert SECRET_DEFAULT not in json.dumps(result.rows, default=str)


ROW_COUNTS = {
    "postgres": [
        "SELECT reltuples FROM pg_class WHERE relname = 'orders'",
        "SELECT c.relpages FROM pg_catalog.pg_class c WHERE c.relname = 'orders_pkey'",
        "SELECT pg_relation_size('orders')",
        "SELECT pg_total_relation_size('orders')",
    ],
    "mysql": [
        "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_NAME = 'orders'",
        "SELECT t.DATA_LENGTH FROM information_schema.tables t WHERE t.table_name = 'orders'",
        "SELECT CARDINALITY FROM information_schema.STATISTICS WHERE TABLE_NAME = 'orders'",
    ],
    "duckdb": [
        "SELECT estimated_size FROM duckdb_tables() WHERE table_name = 'orders'",
        "SELECT t.estimated_size FROM duckdb_tables t WHERE t.table_name = 'orders'",
    ],
}
STAR_CATALOG = {
    "postgres": ("SELECT * FROM pg_class WHERE relname = 'orders'", "reltuples"),
    "mysql": ("SELECT * FROM information_schema.TABLES WHERE TABLE_NAME = 'orders'", "TABLE_ROWS"),
    "duckdb": ("SELECT * FROM duckdb_tables() WHERE table_name = 'orders'", "estimated_size"),
}


@pytest.mark.parametrize("warehouse", ["postgres", "mysql", "duckdb"], indirect=True)
def test_row_counts_stay_with_search_schema(warehouse: Warehouse, policy: AccessPolicy) -> None:
    """Where rows are filtered, the catalog's counts and sizes are not shown (as in search_schema)."""
    for sql in ROW_COUNTS[warehouse.dialect]:
        with pytest.raises(DataError, match="counts or sizes table rows"):
            warehouse.governed(sql, EAST_DM, policy)
        warehouse.governed(sql, FINANCE_DM, policy)  # who sees every row may count them
    sql, count_column = STAR_CATALOG[warehouse.dialect]
    shown = warehouse.governed(sql, EAST_DM, policy)
    assert shown.rows and count_column.lower() not in [c.lower() for c in shown.columns]
    assert count_column.lower() in [c.lower() for c in warehouse.governed(sql, FINANCE_DM, policy).columns]


# --- odd syntax ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "dialect"),
    [
        ("SELECT * FROM ROWS FROM (generate_series(1, 3)) AS g", "postgres"),
        ("SELECT * FROM ROWS FROM (generate_series(1, 3), unnest(ARRAY[1, 2])) AS g(a, b)", "postgres"),
        ("SELECT count(*) FROM orders o, ROWS FROM (generate_series(1, 3)) g", "postgres"),
    ],
)
def test_rows_from_is_checked_not_crashed(sql: str, dialect: str, policy: AccessPolicy) -> None:
    enforced = enforce(sql, "dwh", dialect, EAST_DM, policy=policy, columns=lambda _: ["id", "amount"])
    assert "ROWS FROM" in enforced.sql
    with pytest.raises(DataError, match="pg_read_file"):
        ensure_read_only("SELECT * FROM ROWS FROM (pg_read_file('/etc/passwd')) AS f", "postgres")


FRAGMENTS = [
    "SELECT", "*", "FROM", "orders", "o", ",", "(", ")", "ROWS FROM", "generate_series(1, 3)",
    "LATERAL", "JOIN", "ON", "USING (id)", "WHERE", "amount::int2", "AS", "g(a)", "WITH", "x",
    "AS (SELECT 1)", "UNION", "TABLE", "ONLY", "VALUES (1)", "ORDER BY", "1", "GROUP BY", "HAVING",
    "OVER (ORDER BY amount ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)", "LIMIT", "OFFSET",
    "FETCH FIRST 1 ROW ONLY", "PIVOT", "UNPIVOT", "QUALIFY", "DISTINCT ON (id)", "[1, 2]",
    "{'a': 1}", "->", "'x'", "$1", "?", "ARRAY[1]", "::regclass", "TABLESAMPLE SYSTEM (1)",
    "pg_attribute", "information_schema.tables", "duckdb_tables()", "FILTER (WHERE true)",
    "WITHIN GROUP (ORDER BY 1)", "NATURAL", "unnest(ARRAY[1]) WITH ORDINALITY", "FOR UPDATE",
    "INTO", "x.y.z.w", '"a"."b"', "`q`", "0x1", "1e999", ";", "--", "/*", "*/", "ASOF JOIN",
    "POSITIONAL JOIN", "EXCLUDE (id)", "COLUMNS(*)", "SUMMARIZE", "CASE WHEN", "THEN", "END",
    "IN", "EXISTS", "NOT", "ROLLUP(id)", "GROUPING SETS ((id))", "RECURSIVE", "MATCH_RECOGNIZE",
]  # fmt: skip


@settings(max_examples=400, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    words=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=14),
    prefix=st.booleans(),
    dialect=st.sampled_from(["postgres", "mysql", "duckdb"]),
)
def test_odd_syntax_gets_a_typed_refusal(words: list[str], prefix: bool, dialect: str, policy: AccessPolicy) -> None:
    """Whatever the parser makes of it, the guard and the policy answer or refuse: no crash."""
    sql = ("SELECT * FROM " if prefix else "") + " ".join(words)
    columns = lambda _: ["id", "region", "code", "customer_email", "amount"]  # noqa: E731
    try:
        enforce(sql, "dwh", dialect, EAST_DM, policy=policy, columns=columns)
        ensure_read_only(sql, dialect)
    except DataError:
        pass


# --- through the real entry point ------------------------------------------------------------


def _tool_run(tmp_path: Path, url: str, user: str, sql: str) -> tuple[int, dict[str, Any]]:
    policy = tmp_path / "access.yaml"
    policy.write_text(POLICY_YAML)
    env = clean_env(tmp_path, BA_DATASOURCES=json.dumps({"dwh": url}), BA_ACCESS_POLICY=str(policy))
    done = subprocess.run(
        [BA_AGENT, "tool", "run", "sql_query", "--platform", "slack", "--user", user,
         "--json", json.dumps({"source": "dwh", "sql": sql})],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


ENTRY_POINT_ORACLES = {
    "postgres": "SELECT count(*) AS n FROM orders WHERE amount::int2 IS NOT NULL",
    "mysql": "SELECT count(*) AS n FROM orders WHERE IF(amount >= 98765, EXP(1000), 1) IS NOT NULL",
    "duckdb": "SELECT count(*) AS n FROM orders WHERE code::int IS NOT NULL",
}
ENTRY_POINT_REFUSALS = {
    "postgres": [
        "SELECT count(*) FROM orders WHERE pg_sleep(0.02) IS NOT NULL",
        "SELECT attname, attmissingval::text FROM pg_attribute WHERE attrelid = 'orders'::regclass AND atthasmissing",
    ],
    "mysql": ["SELECT count(*) FROM orders WHERE SLEEP(0.02) = 0"],
    "duckdb": ["SELECT estimated_size FROM duckdb_tables() WHERE table_name = 'orders'"],
}


@pytest.mark.parametrize("warehouse", ["postgres", "mysql", "duckdb"], indirect=True)
def test_through_tool_run(warehouse: Warehouse, tmp_path: Path) -> None:
    code, answer = _tool_run(tmp_path, warehouse.source.url, "U01EAST", ENTRY_POINT_ORACLES[warehouse.dialect])
    assert code == 0, answer
    assert answer["rows"] == [[3]] and "allowed for east_sales only" in answer["access_note"]
    for sql in ENTRY_POINT_REFUSALS[warehouse.dialect]:
        code, answer = _tool_run(tmp_path, warehouse.source.url, "U01EAST", sql)
        assert code == 1 and "error" in answer, answer
        _assert_no_protected_value(json.dumps(answer), sql)
    code, answer = _tool_run(tmp_path, warehouse.source.url, "U01EAST", CAST_ERROR[warehouse.dialect][0])
    assert code == 1
    _assert_no_protected_value(json.dumps(answer), "")
    assert "11|10.00" not in answer["error"]["message"]


# --- who ran a query on a tool's behalf ------------------------------------------------------


async def test_push_down_tools_are_audited_under_their_own_name(database_url: str, tmp_path: Path) -> None:
    build_duckdb(tmp_path / "dwh.duckdb")
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": f"duckdb://{tmp_path / 'dwh.duckdb'}"}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh")),
    )
    engine = create_engine(database_url)
    try:
        sessions = session_factory(engine)
        audit = AuditTrail(sessions)
        access = SourceAccess(config.datasources, config.access_policy, audit)
        pipeline = ToolPipeline([DetectAnomaliesTool(config, access), AttributeChangeTool(config, access)])
        ctx = RunContext(thread_id="t", data_dir=config.data_dir, channel="D1", user="U1", is_dm=True)
        calls = [
            ("toolu_a", "detect_anomalies", {"metric": "gmv", "segment_column": "region"}),
            ("toolu_b", "attribute_change", {
                "metric": "gmv", "dimensions": ["region"],
                "baseline_period": {"start": "2026-01-01", "end": "2026-01-31"},
                "comparison_period": {"start": "2026-02-01", "end": "2026-02-28"},
            }),
        ]  # fmt: skip
        for call_id, name, tool_input in calls:
            result = await pipeline.execute(ToolUseBlock(id=call_id, name=name, input=tool_input), ctx)
            assert not result.is_error, result.observation
        records = await read_audit(sessions)
    finally:
        await engine.dispose()
    assert {(r.tool_call_id, r.tool) for r in records} == {("toolu_a", "detect_anomalies"), ("toolu_b", "attribute_change")}
