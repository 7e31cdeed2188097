"""Bypass attempts against the access policy, on real DuckDB, PostgreSQL and MariaDB databases.

Every attempt runs twice: through the policy (the path `sql_query` takes) against the real
table, and as written against a reference database that holds only what the asker may see
(East rows, no ``customer_email`` column). A governed answer must equal the reference answer
-- the protected rows and column might as well not exist -- or be refused; and neither an
answer nor an error may contain a protected value.

If a database server is down the fixtures start it (as CI would need) instead of skipping.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import psycopg
import pymysql
import pytest

from agent_core.data.errors import DataError
from agent_core.data.source_config import DataSourceConfig
from agent_core.data.sources import query_source
from agent_core.governance.access import governed_source_query
from agent_core.governance.audience import Identity
from agent_core.governance.columns import SourceColumns
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from tests.policies import sales_policy
from tests.test_sources import PG_URL, _ensure_server, _start_postgres_command

ORDERS = [
    (1, "East", "e1@secret.example", "101.25"),
    (2, "East", "e2@secret.example", "102.50"),
    (3, "East", "e3@secret.example", "103.75"),
    (4, "West", "w4@secret.example", "7004.50"),
    (5, "West", "w5@secret.example", "7005.50"),
    (6, "West", "w6@secret.example", "7006.50"),
]
VISIBLE = [(i, region, amount) for i, region, _, amount in ORDERS if region == "East"]
CUSTOMERS = [(i, f"c{i}") for i in range(1, 7)]
# Any of these in an answer or an error message is a leak.
PROTECTED_MARKERS = ("@secret", "West", "7004", "7005", "7006")

POLICY_YAML = sales_policy(hidden_columns=["customer_email"])
EAST_DM = Identity(platform="slack", user="U01EAST", is_dm=True)


@dataclass
class Backend:
    dialect: str
    real: DataSourceConfig  # the full table
    reference: DataSourceConfig  # only what an East seller may see
    names: dict[str, tuple[str, str]]  # placeholder -> (in real SQL, in reference SQL)
    columns: SourceColumns

    def sql(self, template: str, which: int) -> str:
        return template.format(**{key: pair[which] for key, pair in self.names.items()})


# --- databases ------------------------------------------------------------------------------


def _duckdb_backend(tmp: Path) -> Iterator[Backend]:
    for name, full in (("real", True), ("ref", False)):
        with duckdb.connect(str(tmp / f"{name}.duckdb")) as conn:
            if full:
                conn.execute(
                    "CREATE TABLE orders (id INTEGER PRIMARY KEY, region VARCHAR, "
                    "customer_email VARCHAR, amount DECIMAL(10, 2))"
                )
                conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ORDERS)
            else:
                conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, region VARCHAR, amount DECIMAL(10, 2))")
                conn.executemany("INSERT INTO orders VALUES (?, ?, ?)", VISIBLE)
            conn.execute("CREATE TABLE customers (id INTEGER, name VARCHAR)")
            conn.executemany("INSERT INTO customers VALUES (?, ?)", CUSTOMERS)
    yield Backend(
        "duckdb",
        DataSourceConfig(name="dwh", url=f"duckdb://{tmp / 'real.duckdb'}"),
        DataSourceConfig(name="ref", url=f"duckdb://{tmp / 'ref.duckdb'}"),
        {"schema": ("main", "main"), "catalog": ("real", "ref")},
        SourceColumns(),
    )


def _postgres_backend() -> Iterator[Backend]:
    _ensure_server(5432, _start_postgres_command())
    tag = uuid.uuid4().hex[:8]
    real, ref = f"gov_{tag}", f"gov_{tag}_ref"
    roles = {real: f"gov_ro_{tag}", ref: f"gov_ref_{tag}"}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for schema, full in ((real, True), (ref, False)):
            conn.execute(f"CREATE SCHEMA {schema}")
            extra = "customer_email text, " if full else ""
            conn.execute(
                f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, region text, {extra}amount numeric(10, 2))"
            )
            with conn.cursor() as cur:
                rows = ORDERS if full else VISIBLE
                marks = ", ".join(["%s"] * len(rows[0]))
                cur.executemany(f"INSERT INTO {schema}.orders VALUES ({marks})", rows)
            conn.execute(f"CREATE TABLE {schema}.customers (id int, name text)")
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {schema}.customers VALUES (%s, %s)", CUSTOMERS)
            conn.execute(f"ANALYZE {schema}.orders")  # fills pg_stats with sample values
        for schema, role in roles.items():
            conn.execute(f"CREATE ROLE {role} LOGIN")
            conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
            conn.execute(f"ALTER ROLE {role} SET search_path = {schema}")
    url = "postgresql://{}@127.0.0.1:5432/test"
    try:
        yield Backend(
            "postgres",
            DataSourceConfig(name="dwh", url=url.format(roles[real]), statement_timeout_s=5),
            DataSourceConfig(name="ref", url=url.format(roles[ref]), statement_timeout_s=5),
            {"schema": (real, ref), "catalog": ("test", "test")},
            SourceColumns(),
        )
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for schema, role in roles.items():
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")


def _mysql_backend() -> Iterator[Backend]:
    _ensure_server(
        3306, ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"]
    )
    tag = uuid.uuid4().hex[:8]
    real, ref, user = f"gov_{tag}", f"gov_{tag}_ref", f"gov_ro_{tag}"
    root = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    with root.cursor() as cur:
        for database, full in ((real, True), (ref, False)):
            cur.execute(f"CREATE DATABASE {database}")
            extra = "customer_email VARCHAR(80), " if full else ""
            cur.execute(
                f"CREATE TABLE {database}.orders (id INT PRIMARY KEY, region VARCHAR(20), {extra}"
                "amount DECIMAL(10, 2))"
            )
            rows = ORDERS if full else VISIBLE
            marks = ", ".join(["%s"] * len(rows[0]))
            cur.executemany(f"INSERT INTO {database}.orders VALUES ({marks})", rows)
            cur.execute(f"CREATE TABLE {database}.customers (id INT, name VARCHAR(20))")
            cur.executemany(f"INSERT INTO {database}.customers VALUES (%s, %s)", CUSTOMERS)
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'")
        cur.execute(f"GRANT SELECT ON {real}.* TO '{user}'@'%'")
        cur.execute(f"GRANT SELECT ON {ref}.* TO '{user}'@'%'")
    url = f"mysql://{user}:pw-{user}@127.0.0.1:3306/{{}}"
    try:
        yield Backend(
            "mysql",
            DataSourceConfig(name="dwh", url=url.format(real), statement_timeout_s=5),
            DataSourceConfig(name="ref", url=url.format(ref), statement_timeout_s=5),
            {"schema": (real, ref), "catalog": (real, ref)},
            SourceColumns(),
        )
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP DATABASE {real}")
            cur.execute(f"DROP DATABASE {ref}")
            cur.execute(f"DROP USER '{user}'@'%'")
        root.close()


@pytest.fixture(scope="module")
def backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    if request.param == "duckdb":
        yield from _duckdb_backend(tmp_path_factory.mktemp("governance"))
    elif request.param == "postgres":
        yield from _postgres_backend()
    else:
        yield from _mysql_backend()


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> AccessPolicy:
    path = tmp_path_factory.mktemp("policy") / "access.yaml"
    path.write_text(POLICY_YAML)
    return load_policy(path)


# --- the attempts ---------------------------------------------------------------------------

SAME = "same"  # must answer exactly as the reference database does
REFUSED = "refused"  # must fail (the policy, the SQL guard or the database refuses)
NO_VALUES = "no_values"  # metadata may differ from the reference, but no protected value shows


@dataclass(frozen=True)
class Attempt:
    name: str
    sql: str
    expect: str
    dialects: tuple[str, ...] = ("duckdb", "postgres", "mysql")


NOT_MYSQL = ("duckdb", "postgres")

ATTEMPTS = [
    # How the table is named
    Attempt("plain", "SELECT * FROM orders", SAME),
    Attempt("upper_case", "SELECT * FROM ORDERS", SAME),
    Attempt("mixed_case", "select id, Region, AMOUNT from OrDeRs", SAME),
    Attempt("double_quoted", 'SELECT * FROM "orders"', SAME, NOT_MYSQL),
    Attempt("backticks", "SELECT * FROM `orders`", SAME, ("mysql",)),
    Attempt("schema_qualified", "SELECT * FROM {schema}.orders", SAME),
    Attempt("quoted_schema_qualified", 'SELECT * FROM "{schema}"."orders"', SAME, NOT_MYSQL),
    Attempt("catalog_schema_table", "SELECT * FROM {catalog}.main.orders", SAME, ("duckdb",)),
    Attempt("catalog_table", "SELECT * FROM {catalog}.orders", SAME, ("duckdb",)),
    Attempt("schema_qualified_column", "SELECT {schema}.orders.id FROM {schema}.orders", SAME, ("postgres",)),
    Attempt("comments_around_name", "SELECT * FROM /* x */ orders -- y", SAME),
    Attempt("only", "SELECT * FROM ONLY orders", SAME, ("postgres",)),
    Attempt("table_statement", "TABLE orders", SAME, ("postgres",)),
    Attempt("duckdb_from_first", "FROM orders", SAME, ("duckdb",)),
    # Aliases and joins
    Attempt("alias", "SELECT o.id, o.region, o.amount FROM orders o", SAME),
    Attempt("alias_star", "SELECT o.* FROM orders AS o", SAME),
    Attempt("self_join", "SELECT a.id, b.amount FROM orders a JOIN orders b ON a.id = b.id", SAME),
    Attempt("cross_self_join", "SELECT count(*) FROM orders a, orders b", SAME),
    Attempt("left_join_from_open_table", "SELECT c.name, o.amount FROM customers c LEFT JOIN orders o ON o.id = c.id", SAME),
    Attempt("right_join", "SELECT c.name, o.region FROM orders o RIGHT JOIN customers c ON o.id = c.id", SAME),
    Attempt("star_over_join", "SELECT * FROM customers c JOIN orders o ON o.id = c.id", SAME),
    Attempt("using_join", "SELECT * FROM orders JOIN customers USING (id)", SAME),
    Attempt("natural_join", "SELECT * FROM orders NATURAL JOIN customers", SAME),
    Attempt("index_hint", "SELECT * FROM orders FORCE INDEX (PRIMARY)", SAME, ("mysql",)),
    Attempt("tablesample", "SELECT * FROM orders TABLESAMPLE SYSTEM (100)", SAME, ("postgres",)),
    # CTEs
    Attempt("cte_shadowing_the_table", "WITH orders AS (SELECT * FROM orders) SELECT * FROM orders", SAME),
    Attempt("cte_renamed", "WITH x AS (SELECT * FROM orders) SELECT region, sum(amount) FROM x GROUP BY region", SAME),
    Attempt(
        "cte_shadow_in_subquery",
        "SELECT * FROM (WITH orders AS (SELECT id, amount FROM orders) SELECT * FROM orders) t",
        SAME,
    ),
    Attempt(
        "cte_named_like_table_over_open_data",
        "WITH orders AS (SELECT id, name FROM customers) SELECT * FROM orders",
        SAME,
    ),
    Attempt(
        "cte_chain",
        "WITH a AS (SELECT * FROM orders), b AS (SELECT * FROM a WHERE amount > 0) SELECT * FROM b",
        SAME,
    ),
    Attempt(
        "recursive_cte_join",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 6) "
        "SELECT r.n, o.amount FROM r LEFT JOIN orders o ON o.id = r.n",
        SAME,
    ),
    Attempt(
        "recursive_cte_named_like_table",
        "WITH RECURSIVE orders(id) AS (SELECT 1 UNION ALL SELECT id + 1 FROM orders WHERE id < 3) "
        "SELECT * FROM orders",
        SAME,
    ),
    # Subqueries
    Attempt("in_subquery", "SELECT name FROM customers WHERE id IN (SELECT id FROM orders)", SAME),
    Attempt("not_in_subquery", "SELECT name FROM customers WHERE id NOT IN (SELECT id FROM orders)", SAME),
    Attempt("exists_subquery", "SELECT name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.id = c.id)", SAME),
    Attempt("scalar_subquery", "SELECT (SELECT sum(amount) FROM orders) AS total, (SELECT max(id) FROM orders) AS top", SAME),
    Attempt("derived_table", "SELECT t.region, t.n FROM (SELECT region, count(*) AS n FROM orders GROUP BY region) t", SAME),
    Attempt(
        "lateral",
        "SELECT c.id, x.amount FROM customers c, LATERAL (SELECT amount FROM orders o WHERE o.id = c.id) x",
        SAME,
        NOT_MYSQL,
    ),
    # Set operations
    Attempt("union", "SELECT id, region FROM orders UNION SELECT id, name FROM customers", SAME),
    Attempt("union_all_counts", "SELECT count(*) FROM orders UNION ALL SELECT count(*) FROM customers", SAME),
    Attempt("intersect", "SELECT id FROM customers INTERSECT SELECT id FROM orders", SAME),
    Attempt("except", "SELECT id FROM customers EXCEPT SELECT id FROM orders", SAME),
    # Aggregates and windows
    Attempt("count_star", "SELECT count(*), sum(amount), min(amount), max(amount) FROM orders", SAME),
    Attempt("group_by_region", "SELECT region, count(*) FROM orders GROUP BY region", SAME),
    Attempt("window_over_everything", "SELECT id, sum(amount) OVER () AS total, count(*) OVER () AS n FROM orders", SAME),
    Attempt("window_lag", "SELECT id, lag(amount) OVER (ORDER BY id) FROM orders", SAME),
    Attempt("where_false_filter_bypass", "SELECT * FROM orders WHERE region = 'West' OR 1 = 1", SAME),
    # Whole rows as values
    Attempt("row_as_value", "SELECT o FROM orders o", SAME, ("duckdb",)),
    Attempt("row_as_text", "SELECT o::text FROM orders o", SAME, ("postgres",)),
    Attempt("row_to_json", "SELECT row_to_json(o) FROM orders o", SAME, ("postgres",)),
    Attempt("to_jsonb", "SELECT to_jsonb(orders) FROM orders", SAME, ("postgres",)),
    Attempt("star_exclude", "SELECT * EXCLUDE (id) FROM orders", SAME, ("duckdb",)),
    Attempt("columns_regex", "SELECT COLUMNS('.*') FROM orders", SAME, ("duckdb",)),
    Attempt("pivot", "SELECT * FROM (PIVOT orders ON region USING sum(amount))", SAME, ("duckdb",)),
    Attempt("summarize", "SELECT * FROM (SUMMARIZE orders)", SAME, ("duckdb",)),
    # The hidden column, everywhere a column can stand
    Attempt("hidden_in_select", "SELECT customer_email FROM orders", REFUSED),
    Attempt("hidden_qualified_by_table", "SELECT orders.customer_email FROM orders", REFUSED),
    Attempt("hidden_qualified_by_schema", "SELECT {schema}.orders.customer_email FROM {schema}.orders", REFUSED, ("postgres",)),
    Attempt("hidden_in_where", "SELECT id FROM orders WHERE customer_email LIKE '%secret%'", REFUSED),
    Attempt("hidden_in_group_by", "SELECT count(*) FROM orders GROUP BY customer_email", REFUSED),
    Attempt("hidden_in_order_by", "SELECT id FROM orders ORDER BY customer_email", REFUSED),
    Attempt("hidden_in_having", "SELECT region FROM orders GROUP BY region HAVING max(customer_email) > ''", REFUSED),
    Attempt("hidden_in_join_on", "SELECT c.id FROM customers c JOIN orders o ON o.customer_email = c.name", REFUSED),
    Attempt("hidden_in_function_argument", "SELECT length(o.customer_email) FROM orders o", REFUSED),
    Attempt("hidden_in_window", "SELECT id, row_number() OVER (PARTITION BY customer_email) FROM orders", REFUSED),
    Attempt("hidden_in_case", "SELECT CASE WHEN customer_email LIKE 'w%' THEN 1 ELSE 0 END FROM orders", REFUSED),
    Attempt(
        "hidden_in_correlated_subquery",
        "SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM customers c WHERE c.name = o.customer_email)",
        REFUSED,
    ),
    Attempt(
        "hidden_unqualified_in_nested_subquery",
        "SELECT id FROM orders WHERE EXISTS (SELECT 1 FROM customers WHERE name = customer_email)",
        REFUSED,
    ),
    Attempt("hidden_through_cte", "WITH x AS (SELECT * FROM orders) SELECT customer_email FROM x", REFUSED),
    Attempt("hidden_through_derived_table", "SELECT t.customer_email FROM (SELECT * FROM orders) t", REFUSED),
    Attempt(
        "hidden_through_using",
        "SELECT id FROM orders JOIN customers c ON true JOIN orders o2 USING (customer_email)",
        REFUSED,
    ),
    Attempt("column_alias_list", "SELECT * FROM orders AS o(a, b, c, d)", REFUSED, NOT_MYSQL),
    # Catalogs, files and statements that are not queries
    Attempt(
        "information_schema_columns",
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'orders'",
        NO_VALUES,
    ),
    Attempt("pg_stats", "SELECT most_common_vals::text FROM pg_stats WHERE tablename = 'orders'", REFUSED, ("postgres",)),
    Attempt("duckdb_columns", "SELECT column_name FROM duckdb_columns() WHERE table_name = 'orders'", NO_VALUES, ("duckdb",)),
    Attempt("read_csv", "SELECT * FROM read_csv('/etc/passwd')", REFUSED, ("duckdb",)),
    Attempt("file_scan", "SELECT * FROM 'orders.parquet'", REFUSED, ("duckdb",)),
    Attempt("query_table_function", "SELECT * FROM query_table('orders')", REFUSED, ("duckdb",)),
    Attempt("copy", "COPY orders TO '/tmp/orders.csv'", REFUSED, NOT_MYSQL),
    Attempt("attach", "ATTACH '/tmp/other.duckdb' AS other", REFUSED, ("duckdb",)),
    Attempt("into_outfile", "SELECT * FROM orders INTO OUTFILE '/tmp/orders.csv'", REFUSED, ("mysql",)),
    Attempt("two_statements", "SELECT 1; SELECT * FROM orders", REFUSED),
]


def _cases() -> list:
    return [
        pytest.param(dialect, attempt, id=f"{dialect}-{attempt.name}")
        for attempt in ATTEMPTS
        for dialect in attempt.dialects
    ]


def _canonical(rows: list[list[object]]) -> list[str]:
    return sorted(json.dumps(row, default=str, sort_keys=True) for row in rows)


def _assert_no_protected_value(text: str) -> None:
    for marker in PROTECTED_MARKERS:
        assert marker not in text, f"protected value {marker!r} leaked: {text[:300]}"


@pytest.mark.parametrize(("backend", "attempt"), _cases(), indirect=["backend"])
def test_no_protected_row_or_column_leaks(backend: Backend, attempt: Attempt, policy: AccessPolicy) -> None:
    governed_sql = backend.sql(attempt.sql, 0)
    try:
        result = governed_source_query(backend.real, governed_sql, EAST_DM, policy, backend.columns, row_cap=1000)
    except DataError as refused:
        _assert_no_protected_value(str(refused))
        if attempt.expect == SAME:  # only where the reference database refuses it too
            with pytest.raises(DataError):
                query_source(backend.reference, backend.sql(attempt.sql, 1), row_cap=1000)
        else:
            assert attempt.expect == REFUSED, f"refused unexpectedly: {refused}"
        return
    _assert_no_protected_value(json.dumps(result.rows, default=str) + json.dumps(result.columns))
    assert attempt.expect != REFUSED, f"ran but must be refused: {result.sql}"
    if attempt.expect == SAME:
        reference = query_source(backend.reference, backend.sql(attempt.sql, 1), row_cap=1000)
        assert result.columns == reference.columns
        assert _canonical(result.rows) == _canonical(reference.rows), result.sql
