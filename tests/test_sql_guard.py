"""The read-only SQL guard: what it accepts, what it refuses, and the row-limit helper."""

from __future__ import annotations

import pytest

from agent_core.data.errors import SQLParseError, UnsafeSQLError
from agent_core.data.sql_guard import ensure_read_only, with_row_limit


@pytest.mark.parametrize(
    ("sql", "dialect"),
    [
        ("SELECT 1", "duckdb"),
        ("select region, sum(gmv) from demo.sales group by 1 order by 2 desc", "duckdb"),
        ("sElEcT * FrOm sales WhErE region = 'East China'", "duckdb"),
        (
            "WITH d AS (SELECT date, gmv FROM sales) SELECT date, sum(gmv) FROM d GROUP BY date",
            "duckdb",
        ),
        ("SELECT 1 UNION ALL SELECT 2", "duckdb"),
        ("SELECT a FROM t INTERSECT SELECT a FROM u EXCEPT SELECT a FROM v", "postgres"),
        ("(SELECT 1) UNION (SELECT 2) ORDER BY 1", "duckdb"),
        ("FROM sales", "duckdb"),
        (
            "SELECT region, sum(gmv) FILTER (WHERE channel = 'app') FROM sales GROUP BY ALL",
            "duckdb",
        ),
        ("SELECT * FROM range(10)", "duckdb"),
        ("SELECT * FROM unnest([1, 2, 3])", "duckdb"),
        ("SELECT * FROM generate_series(1, 10) AS g", "postgres"),
        ("SELECT pg_typeof(1), to_regclass('t')", "postgres"),
        ("SELECT * FROM information_schema.tables", "postgres"),
        ("SELECT * FROM `my table` WHERE x = 'a;b' LIMIT 3", "mysql"),
        ("SELECT 1;", "duckdb"),
        ("SELECT 'DROP TABLE x; --' AS s", "duckdb"),
        ("SELECT json_query(doc, '$.a') FROM t", "postgres"),
        ("SELECT * FROM JSON_TABLE('[1]', '$[*]' COLUMNS (a INT PATH '$')) AS j", "mysql"),
        # Typical analytical queries, per dialect.
        (
            "SELECT date_trunc('month', order_date) AS m, region, sum(gmv) AS gmv, "
            "sum(gmv) / NULLIF(lag(sum(gmv)) OVER (PARTITION BY region ORDER BY "
            "date_trunc('month', order_date)), 0) - 1 AS mom FROM demo.sales "
            "GROUP BY ALL ORDER BY 1, 2",
            "duckdb",
        ),
        (
            "SELECT region, median(gmv), quantile_cont(gmv, [0.1, 0.9]), arg_max(sku, gmv), "
            "count(*) FILTER (WHERE gmv > 100), strftime(max(order_date), '%Y-%m-%d'), "
            "list_transform(list(gmv), x -> round(x, 1))[1:3] FROM sales GROUP BY region "
            "QUALIFY row_number() OVER (ORDER BY sum(gmv) DESC) <= 5",
            "duckdb",
        ),
        (
            "SELECT * FROM sales PIVOT (sum(gmv) FOR channel IN ('app', 'web'))",
            "duckdb",
        ),
        (
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main'",
            "duckdb",
        ),
        ("SELECT * FROM duckdb_tables() WHERE NOT internal", "duckdb"),
        ("SELECT column_name FROM duckdb_columns WHERE table_name = 'sales'", "duckdb"),
        ("SELECT * FROM pragma_table_info('sales')", "duckdb"),
        ("SELECT * FROM demo.main.pg_like_name", "duckdb"),
        (
            "WITH monthly AS (SELECT date_trunc('month', created_at)::date AS m, "
            "sum(amount) AS total FROM finance.orders WHERE created_at >= now() - interval "
            "'1 year' GROUP BY 1) SELECT m, total, percentile_cont(0.5) WITHIN GROUP "
            "(ORDER BY total) OVER () AS p50, to_char(m, 'YYYY-MM') FROM monthly",
            "postgres",
        ),
        (
            "SELECT customer_id, string_agg(DISTINCT sku, ',' ORDER BY sku), "
            "jsonb_agg(jsonb_build_object('sku', sku)), count(*) FILTER (WHERE refunded), "
            "coalesce(max(doc->>'tier'), 'none'), age(max(created_at)) FROM orders "
            "GROUP BY 1 HAVING count(*) > 3",
            "postgres",
        ),
        ("SELECT e.key, e.value FROM t, LATERAL jsonb_each(t.doc) AS e", "postgres"),
        ("SELECT schemaname, tablename FROM pg_catalog.pg_tables", "postgres"),
        ("SELECT relname, reltuples FROM pg_class WHERE relkind = 'r'", "postgres"),
        (
            "SELECT c.column_name, c.data_type FROM information_schema.columns AS c "
            "WHERE c.table_schema = 'public'",
            "postgres",
        ),
        (
            "SELECT DATE_FORMAT(created_at, '%Y-%m') AS m, COUNT(DISTINCT customer_id), "
            "SUM(IF(status = 'paid', amount, 0)), GROUP_CONCAT(DISTINCT sku ORDER BY sku "
            "SEPARATOR ','), JSON_UNQUOTE(JSON_EXTRACT(meta, '$.src')), "
            "TIMESTAMPDIFF(DAY, MIN(created_at), MAX(created_at)) FROM orders "
            "GROUP BY m WITH ROLLUP",
            "mysql",
        ),
        (
            "SELECT id, amount, SUM(amount) OVER (ORDER BY id ROWS BETWEEN 6 PRECEDING AND "
            "CURRENT ROW) / 7 AS ma7, RANK() OVER (PARTITION BY region ORDER BY amount DESC) "
            "FROM shop.orders",
            "mysql",
        ),
        (
            "SELECT table_name, table_rows FROM INFORMATION_SCHEMA.TABLES "
            "WHERE table_schema = DATABASE()",
            "mysql",
        ),
    ],
)
def test_accepts_read_only_queries(sql: str, dialect: str) -> None:
    assert ensure_read_only(sql, dialect)


def test_returns_normalized_sql_without_comments() -> None:
    assert ensure_read_only("select 1 -- ; DROP TABLE x", "duckdb") == "SELECT 1"
    # A line comment containing "*/" must not break out when regenerated as a block comment.
    assert ensure_read_only("SELECT 1 -- */ DROP TABLE x", "duckdb") == "SELECT 1"
    assert ensure_read_only("SELECT /* ; DELETE FROM t */ 1", "postgres") == "SELECT 1"


@pytest.mark.parametrize(
    ("sql", "dialect", "needle"),
    [
        ("INSERT INTO t VALUES (1)", "duckdb", "INSERT"),
        ("update t set a = 1", "postgres", "UPDATE"),
        ("DeLeTe FROM t", "mysql", "DELETE"),
        ("DROP TABLE sales", "duckdb", "DROP"),
        ("CREATE TABLE x AS SELECT 1", "duckdb", "CREATE"),
        ("ALTER TABLE t ADD COLUMN c INT", "postgres", "ALTER"),
        ("TRUNCATE t", "postgres", "TRUNCATE"),
        ("MERGE INTO t USING u ON t.a = u.a WHEN MATCHED THEN DELETE", "postgres", "MERGE"),
        ("ATTACH 'other.db' AS o", "duckdb", "ATTACH"),
        ("DETACH o", "duckdb", "DETACH"),
        ("COPY sales TO '/tmp/out.csv'", "duckdb", "COPY"),
        ("COPY t FROM PROGRAM 'id'", "postgres", "COPY"),
        ("PRAGMA table_info('sales')", "duckdb", "PRAGMA"),
        ("SET enable_external_access = true", "duckdb", "SET"),
        ("RESET memory_limit", "duckdb", "RESET"),
        ("INSTALL httpfs", "duckdb", "INSTALL"),
        ("LOAD httpfs", "duckdb", "LOAD"),
        ("CALL pragma_version()", "duckdb", "CALL"),
        ("BEGIN", "duckdb", "transaction"),
        ("WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x", "postgres", "DELETE"),
        ("WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x", "postgres", "INSERT"),
        ("SELECT * INTO new_table FROM t", "postgres", "INTO"),
        ("SELECT * FROM t FOR UPDATE", "postgres", "lock"),
        ("SELECT * FROM read_csv('/etc/passwd')", "duckdb", "read_csv"),
        ("SELECT * FROM READ_CSV_AUTO('x.csv')", "duckdb", "read_csv_auto"),
        ("SELECT * FROM read_parquet('x.parquet')", "duckdb", "read_parquet"),
        ("SELECT * FROM read_json_auto('x.json')", "duckdb", "read_json_auto"),
        ("SELECT * FROM glob('/etc/*')", "duckdb", "glob"),
        ("SELECT read_text('/etc/passwd')", "duckdb", "read_text"),
        ("SELECT * FROM read_blob('/etc/passwd')", "duckdb", "read_blob"),
        ("SELECT * FROM postgres_scan('dbname=x', 'public', 't')", "duckdb", "postgres_scan"),
        ("SELECT * FROM sqlite_scan('x.db', 't')", "duckdb", "sqlite_scan"),
        ("SELECT * FROM query('DROP TABLE sales')", "duckdb", "query"),
        ("SELECT * FROM duckdb_secrets()", "duckdb", "duckdb_secrets"),
        ("SELECT * FROM 'data.csv'", "duckdb", "path"),
        ("SELECT * FROM 'https://example.com/x.parquet'", "duckdb", "path"),
        ("SELECT * FROM t1 JOIN LATERAL read_csv(t1.p) ON TRUE", "duckdb", "read_csv"),
        ("SELECT a FROM t WHERE a IN (SELECT read_text('x'))", "duckdb", "read_text"),
        ("SELECT pg_read_file('/etc/passwd')", "postgres", "pg_read_file"),
        ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "postgres", "pg_read_file"),
        ("SELECT \"pg_read_file\"('/etc/passwd')", "postgres", "pg_read_file"),
        ("SELECT pg_ls_dir('.')", "postgres", "pg_ls_dir"),
        ("SELECT pg_terminate_backend(1)", "postgres", "pg_terminate_backend"),
        ("SELECT lo_import('/etc/passwd')", "postgres", "lo_import"),
        ("SELECT * FROM dblink('host=x', 'SELECT 1') AS t(a int)", "postgres", "dblink"),
        (
            "SELECT set_config('default_transaction_read_only', 'off', false)",
            "postgres",
            "set_config",
        ),
        ("SELECT query_to_xml('DELETE FROM t', true, false, '')", "postgres", "query_to_xml"),
        ("SELECT nextval('seq')", "postgres", "nextval"),
        ("SELECT LOAD_FILE('/etc/passwd')", "mysql", "load_file"),
        ("SELECT * FROM my_table_function()", "duckdb", "table function"),
        ("SUMMARIZE sales", "duckdb", "SUMMARIZE"),
        ("EXPLAIN SELECT 1", "postgres", "EXPLAIN"),
    ],
)
def test_refuses_unsafe_sql(sql: str, dialect: str, needle: str) -> None:
    with pytest.raises(UnsafeSQLError) as raised:
        ensure_read_only(sql, dialect)
    assert needle.lower() in raised.value.reason.lower()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT 1; DROP TABLE x",
        "select 1;delete from t",
        "SELECT 1; SELECT 2",
        "SELECT 'a;b'; ATTACH 'x.db'",
    ],
)
def test_refuses_multiple_statements(sql: str) -> None:
    with pytest.raises(UnsafeSQLError, match="one statement"):
        ensure_read_only(sql, "duckdb")


@pytest.mark.parametrize("sql", ["SELEC 1", "SELECT (", "", "   ", "-- only a comment"])
def test_unparseable_sql_is_a_parse_error(sql: str) -> None:
    with pytest.raises(SQLParseError):
        ensure_read_only(sql, "duckdb")


def test_parse_error_is_an_unsafe_sql_error() -> None:
    # Callers that catch UnsafeSQLError also catch parse errors: both mean "refused".
    assert issubclass(SQLParseError, UnsafeSQLError)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1", "SELECT 1 LIMIT 100"),
        ("select a from t order by a", "SELECT a FROM t ORDER BY a LIMIT 100"),
        ("SELECT 1 LIMIT 500", "SELECT 1 LIMIT 100"),
        ("SELECT 1 LIMIT 5", "SELECT 1 LIMIT 5"),
        ("SELECT 1 UNION SELECT 2", "SELECT 1 UNION SELECT 2 LIMIT 100"),
        ("SELECT a FROM t LIMIT 1000 OFFSET 20", "SELECT a FROM t LIMIT 100 OFFSET 20"),
        (
            "WITH a AS (SELECT 1 AS x) SELECT * FROM a",
            "WITH a AS (SELECT 1 AS x) SELECT * FROM a LIMIT 100",
        ),
    ],
)
def test_with_row_limit(sql: str, expected: str) -> None:
    assert with_row_limit(sql, 100, "duckdb") == expected


def test_with_row_limit_wraps_fetch_first() -> None:
    capped = with_row_limit("SELECT * FROM t FETCH FIRST 500 ROWS ONLY", 100, "postgres")
    assert (
        capped == "SELECT * FROM (SELECT * FROM t FETCH FIRST 500 ROWS ONLY) AS _capped LIMIT 100"
    )


def test_with_row_limit_refuses_non_queries() -> None:
    with pytest.raises(UnsafeSQLError):
        with_row_limit("DELETE FROM t", 10, "duckdb")


# --- issue item 7: nesting, path leaks, file names --------------------------------------------


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_two_hundred_nested_parentheses_are_refused_cleanly(dialect: str) -> None:
    sql = "SELECT " + "(" * 200 + "1" + ")" * 200
    with pytest.raises(SQLParseError, match="at most 64"):
        ensure_read_only(sql, dialect)


@pytest.mark.parametrize(
    ("sql", "dialect", "needle"),
    [
        ("SELECT * FROM duckdb_databases()", "duckdb", "duckdb_databases"),
        ("SELECT path FROM duckdb_databases", "duckdb", "duckdb_databases"),
        ("SELECT current_setting('temp_directory')", "duckdb", "current_setting"),
        ("SELECT current_setting('data_directory')", "postgres", "current_setting"),
        ("SELECT * FROM duckdb_settings()", "duckdb", "duckdb_settings"),
        ("SELECT * FROM pragma_database_list", "duckdb", "pragma_database_list"),
    ],
)
def test_functions_revealing_server_paths_are_refused(sql: str, dialect: str, needle: str) -> None:
    with pytest.raises(UnsafeSQLError, match=needle):
        ensure_read_only(sql, dialect)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM data.csv",
        'SELECT * FROM "/srv/exports/data".csv',
        "SELECT * FROM exports.orders.parquet",
        'SELECT * FROM "s3://bucket/key".parquet',
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM sales, '../secret.json'",
    ],
)
def test_path_qualified_file_names_are_refused_by_the_guard(sql: str) -> None:
    with pytest.raises(UnsafeSQLError, match="path or file name"):
        ensure_read_only(sql, "duckdb")
