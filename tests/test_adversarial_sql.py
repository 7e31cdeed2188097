# Over 600 lines: the adversarial SQL catalogue; each case is one attempt, listed so they read as a table.
"""Hostile SQL against the read-only guard, per dialect, plus property-based tests.

* ``HOSTILE[dialect]``: at least 50 queries per dialect — functions that run SQL held in a
  string, file and network readers, side-effecting functions, locks, settings and variables,
  system catalogs, statements, and comment / quoting / Unicode tricks. Each must be refused,
  and the refusal must name what was refused.
* Hypothesis: random compositions of allowed constructs stay allowed; a disallowed function or
  catalog table placed anywhere in such a tree is refused, by name.
* Live: a few hostile queries through the real ``query_source`` path against the local
  PostgreSQL and MariaDB are refused before any connection is made — while the same SQL run
  without the guard shows the threat is real.
* The result cap bounds the first row too (``SELECT repeat('x', 20000000)``), and deep nesting
  is a clear error instead of a ``RecursionError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from string import Formatter

import psycopg
import pymysql
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from agent_core.data import sql_allowlist
from agent_core.data.conversation import demo_database
from agent_core.data.demo import ensure_demo_database
from agent_core.data.duckdb_engine import run_duckdb_query
from agent_core.data.errors import QueryFailed, SQLParseError, UnsafeSQLError
from agent_core.data.result_cap import cap_rows, fetch_capped, row_size
from agent_core.data.source_config import DataSourceConfig
from agent_core.data.sources import _execute_on_source, query_source
from agent_core.data.sql_guard import ensure_read_only, with_row_limit
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.sql import SqlQueryTool

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_URL = "mysql://root@127.0.0.1:3306/test"

# The query from the issue: ts_stat runs the SQL in its argument, which read /etc/passwd.
TS_STAT_EXPLOIT = (
    "SELECT (ts_stat('SELECT array_to_tsvector(array_remove(string_to_array("
    "pg_read_file(''/etc/passwd''), E''\\n''), ''''))')).word"
)

# (sql, text the refusal must mention — usually the refused function or table; None: any
# refusal, e.g. a parse error).
HOSTILE: dict[str, list[tuple[str, str | None]]] = {
    "postgres": [
        # Functions that run SQL given as a string.
        (TS_STAT_EXPLOIT, "ts_stat"),
        ("SELECT ts_rewrite('a'::tsquery, 'SELECT pg_ls_dir(''/'')')", "ts_rewrite"),
        (
            "SELECT (ts_stat('SELECT to_tsvector(pg_terminate_backend(pid)::text) "
            "FROM pg_stat_activity')).word",
            "ts_stat",
        ),
        ("SELECT * FROM ts_stat('SELECT to_tsvector(pg_reload_conf()::text)')", "ts_stat"),
        ("SELECT query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, true, '')", "query_to_xml"),
        ("SELECT query_to_xmlschema('SELECT 1', true, true, '')", "query_to_xmlschema"),
        ("SELECT query_to_xml_and_xmlschema('SELECT 1', true, true, '')", "query_to_xml_and_xmlschema"),
        ("SELECT cursor_to_xml('c', 1, true, true, '')", "cursor_to_xml"),
        ("SELECT database_to_xml(true, true, '')", "database_to_xml"),
        ("SELECT schema_to_xml('public', true, true, '')", "schema_to_xml"),
        ("SELECT table_to_xml('pg_authid', true, true, '')", "table_to_xml"),
        ("SELECT * FROM dblink('dbname=test', 'DELETE FROM t') AS x(a int)", "dblink"),
        ("SELECT dblink_exec('dbname=test', 'DROP TABLE t')", "dblink_exec"),
        ("SELECT xpath('/a', query_to_xml('SELECT 1', true, true, ''))", "xpath"),
        # File and network access.
        ("SELECT pg_read_file('/etc/passwd')", "pg_read_file"),
        ("SELECT pg_read_binary_file('/etc/passwd')", "pg_read_binary_file"),
        ("SELECT pg_ls_dir('/')", "pg_ls_dir"),
        ("SELECT * FROM pg_ls_dir('/') AS d", "pg_ls_dir"),
        ("SELECT pg_stat_file('/etc/passwd')", "pg_stat_file"),
        ("SELECT * FROM pg_ls_logdir()", "pg_ls_logdir"),
        ("SELECT * FROM pg_ls_waldir()", "pg_ls_waldir"),
        ("SELECT pg_current_logfile()", "pg_current_logfile"),
        ("SELECT lo_import('/etc/passwd')", "lo_import"),
        ("SELECT lo_export(1, '/tmp/x')", "lo_export"),
        ("SELECT convert_from(lo_get(1), 'UTF8')", "lo_get"),
        ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "pg_read_file"),
        ('SELECT "pg_read_file"(\'/etc/passwd\')', "pg_read_file"),
        ("SELECT PG_READ_FILE('/etc/passwd')", "pg_read_file"),
        ("SELECT inet_server_addr()", "inet_server_addr"),
        # Side effects on the server and other sessions.
        ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity", "pg_terminate_backend"),
        ("SELECT pg_cancel_backend(1)", "pg_cancel_backend"),
        ("SELECT pg_reload_conf()", "pg_reload_conf"),
        ("SELECT pg_rotate_logfile()", "pg_rotate_logfile"),
        ("SELECT pg_switch_wal()", "pg_switch_wal"),
        ("SELECT pg_create_restore_point('x')", "pg_create_restore_point"),
        ("SELECT pg_notify('channel', 'payload')", "pg_notify"),
        ("SELECT nextval('orders_id_seq')", "nextval"),
        ("SELECT setval('orders_id_seq', 1)", "setval"),
        ("SELECT txid_current()", "txid_current"),
        ("SELECT pg_stat_reset()", "pg_stat_reset"),
        ("SELECT pg_logical_emit_message(true, 'p', 'x')", "pg_logical_emit_message"),
        ("SELECT pg_create_logical_replication_slot('s', 'pgoutput')", "pg_create_logical_replication_slot"),
        ("SELECT pg_promote()", "pg_promote"),
        # Locks.
        ("SELECT pg_advisory_lock(1)", "pg_advisory_lock"),
        ("SELECT pg_advisory_xact_lock(1)", "pg_advisory_xact_lock"),
        ("SELECT pg_try_advisory_lock(1)", "pg_try_advisory_lock"),
        ("SELECT * FROM orders FOR UPDATE", "lock"),
        ("SELECT * FROM orders FOR NO KEY UPDATE SKIP LOCKED", "lock"),
        ("SELECT * FROM orders FOR SHARE NOWAIT", "lock"),
        ("LOCK TABLE orders IN ACCESS EXCLUSIVE MODE", "lock"),
        # Settings.
        ("SELECT set_config('default_transaction_read_only', 'off', false)", "set_config"),
        ("SELECT current_setting('data_directory')", "current_setting"),
        ("SET statement_timeout = 0", "set"),
        ("SET ROLE postgres", "set"),
        ("RESET ALL", "reset"),
        ("SHOW data_directory", "show"),
        ("SELECT * FROM pg_settings", "pg_settings"),
        ("SELECT setting FROM pg_catalog.pg_settings WHERE name = 'data_directory'", "pg_settings"),
        ("SELECT * FROM pg_file_settings", "pg_file_settings"),
        ("SELECT * FROM pg_hba_file_rules", "pg_hba_file_rules"),
        # System catalogs beyond the allowlist.
        ("SELECT rolpassword FROM pg_authid", "pg_authid"),
        ("SELECT * FROM pg_catalog.pg_authid", "pg_authid"),
        ('SELECT * FROM "pg_catalog"."pg_authid"', "pg_authid"),
        ("TABLE pg_authid", "pg_authid"),
        ("SELECT passwd FROM pg_shadow", "pg_shadow"),
        ("SELECT * FROM pg_user_mapping", "pg_user_mapping"),
        ("SELECT query FROM pg_stat_activity", "pg_stat_activity"),
        ("SELECT * FROM pg_toast.pg_toast_2619", "pg_toast"),
        ("SELECT * FROM information_schema.user_mapping_options", "user_mapping_options"),
        ("SELECT a FROM t WHERE a IN (SELECT rolname FROM pg_authid)", "pg_authid"),
        # User-defined functions through a qualified name.
        ("SELECT public.evil()", "public.evil"),
        ("SELECT myschema.upper('x')", "myschema.upper"),
        # Statements.
        ("DO $$ BEGIN PERFORM pg_sleep(1); END $$", None),
        ("COPY (SELECT 1) TO PROGRAM 'id'", "copy"),
        ("CALL refresh_everything()", "call"),
        ("PREPARE p AS SELECT 1", "prepare"),
        ("EXPLAIN ANALYZE DELETE FROM orders", "explain"),
        ("WITH x AS (UPDATE orders SET gmv = 0 RETURNING id) SELECT * FROM x", "update"),
        ("SELECT * INTO TEMP stolen FROM orders", "into"),
        ("SELECT 1; SELECT pg_read_file('/etc/passwd')", "one statement"),
        ("VACUUM orders", "vacuum"),
        # Variables and placeholders.
        ("SELECT * FROM orders WHERE id = $1", "placeholder"),
        # Comment, quoting and Unicode tricks.
        ("SELECT 1 /* ; */ ; SELECT pg_read_file('/etc/passwd')", "one statement"),
        ("SELECT pg_read_file/**/('/etc/passwd')", "pg_read_file"),
        ("SELECT 'a\\' , pg_read_file('/etc/passwd') --'", "pg_read_file"),
        ("SELECT $q$x$q$ || pg_ls_dir('/')", "pg_ls_dir"),
        ("SELECT E'\\'' || pg_ls_dir('/')", "pg_ls_dir"),
        ("SELECT pg_read_f\u0456le('/etc/passwd')", "pg_read_f\u0456le"),  # Cyrillic i
        ("SELECT * FROM pg_\u0430uthid", "pg_\u0430uthid"),  # Cyrillic a
        ("SELECT * FROM \uff50\uff47_authid", "authid"),  # full-width "pg"
        ('SELECT * FROM U&"pg\\005fauthid"', None),
        ('SELECT U&"pg\\005fread\\005ffile"(\'/etc/passwd\')', None),
    ],
    "duckdb": [
        # Files, URLs and external databases.
        ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
        ("SELECT * FROM read_csv_auto('/etc/passwd')", "read_csv_auto"),
        ("SELECT * FROM read_parquet('s3://bucket/x.parquet')", "read_parquet"),
        ("SELECT * FROM read_json('/srv/x.json')", "read_json"),
        ("SELECT * FROM read_json_auto('/srv/x.json')", "read_json_auto"),
        ("SELECT * FROM read_ndjson('/srv/x.json')", "read_ndjson"),
        ("SELECT content FROM read_text('/etc/passwd')", "read_text"),
        ("SELECT read_text('/etc/passwd')", "read_text"),
        ("SELECT * FROM read_blob('/etc/passwd')", "read_blob"),
        ("SELECT * FROM parquet_scan('x.parquet')", "parquet_scan"),
        ("SELECT * FROM parquet_metadata('x.parquet')", "parquet_metadata"),
        ("SELECT * FROM parquet_schema('x.parquet')", "parquet_schema"),
        ("SELECT * FROM glob('/etc/*')", "glob"),
        ("SELECT * FROM sniff_csv('/etc/passwd')", "sniff_csv"),
        ("SELECT * FROM sqlite_scan('x.db', 't')", "sqlite_scan"),
        ("SELECT * FROM postgres_scan('host=db', 'public', 't')", "postgres_scan"),
        ("SELECT * FROM iceberg_scan('s3://x')", "iceberg_scan"),
        ("SELECT * FROM delta_scan('s3://x')", "delta_scan"),
        ("SELECT * FROM main.read_csv('/etc/passwd')", "read_csv"),
        ("SELECT * FROM '/etc/passwd'", "path"),
        ('SELECT * FROM "/etc/passwd"', "path"),
        ("SELECT * FROM 'https://example.com/x.csv'", "path"),
        ("SELECT * FROM data.csv", "path"),
        ('SELECT * FROM "/srv/secret/data".csv', "path"),
        ('SELECT * FROM "s3://bucket/key".parquet', "path"),
        ("SELECT * FROM a.b.c.csv", "table name"),
        ("SELECT * FROM 'x.parquet' TABLESAMPLE 10", "path"),
        ("SELECT * FROM orders JOIN 'other.csv' ON true", "path"),
        ("SELECT * FROM '~/.ssh/id_rsa'", "path"),
        ("SELECT * FROM 'C:\\Windows\\win.ini'", "path"),
        ("SELECT * FROM '*.csv'", "path"),
        ("SELECT (SELECT count(*) FROM 'data.csv')", "path"),
        ("WITH x AS (FROM read_text('/etc/passwd')) SELECT * FROM x", "read_text"),
        # SQL given as a string.
        ("SELECT * FROM query('SELECT * FROM read_text(''/etc/passwd'')')", "query"),
        ("SELECT * FROM query_table('orders')", "query_table"),
        ("SELECT json_execute_serialized_sql('{}')", "json_execute_serialized_sql"),
        # Paths, settings, environment, secrets.
        ("SELECT * FROM duckdb_databases()", "duckdb_databases"),
        ("SELECT path FROM duckdb_databases", "duckdb_databases"),
        ("SELECT path FROM main.duckdb_databases", "duckdb_databases"),
        ("SELECT * FROM system.main.duckdb_tables", "system.main.duckdb_tables"),
        ("SELECT * FROM duckdb_settings()", "duckdb_settings"),
        ("SELECT * FROM duckdb_extensions()", "duckdb_extensions"),
        ("SELECT * FROM duckdb_secrets()", "duckdb_secrets"),
        ("SELECT * FROM duckdb_temporary_files()", "duckdb_temporary_files"),
        ("SELECT which_secret('s3://x', 's3')", "which_secret"),
        ("SELECT current_setting('temp_directory')", "current_setting"),
        ("SELECT getenv('HOME')", "getenv"),
        ("SELECT getvariable('x')", "getvariable"),
        ("SELECT * FROM pragma_database_list", "pragma_database_list"),
        ("SELECT * FROM pragma_database_list()", "pragma_database_list"),
        ("SELECT * FROM pg_settings", "pg_settings"),
        ("SELECT * FROM pg_catalog.pg_settings", "pg_settings"),
        ("SELECT * FROM temp.main.anything", "temp.main.anything"),
        # Statements.
        ("ATTACH '/tmp/x.db' AS x", "attach"),
        ("COPY orders TO '/tmp/x.csv'", "copy"),
        ("EXPORT DATABASE '/tmp/x'", None),
        ("INSTALL httpfs", "install"),
        ("LOAD httpfs", "load"),
        ("SET enable_external_access = true", "set"),
        ("SET VARIABLE x = 1", "set"),
        ("RESET lock_configuration", "reset"),
        ("PRAGMA enable_profiling", "pragma"),
        ("CALL duckdb_settings()", "call"),
        ("CHECKPOINT", None),
        ("CREATE MACRO m() AS 1", "create"),
        ("SELECT 1; COPY orders TO '/tmp/x.csv'", "one statement"),
        # Side effects.
        ("SELECT nextval('seq')", "nextval"),
        ("SELECT setseed(0.5)", "setseed"),
        # Placeholders and variables.
        ("SELECT * FROM orders WHERE id = ?", "placeholder"),
        ("SELECT * FROM orders WHERE id = $id", "placeholder"),
        # Quoting and Unicode tricks.
        ('SELECT "read_text"(\'/etc/passwd\')', "read_text"),
        ("SELECT READ_TEXT('/etc/passwd')", "read_text"),
        ("SELECT r\u0435ad_text('/etc/passwd')", "r\u0435ad_text"),  # Cyrillic e
        ("SELECT 'a\\' , read_text('/etc/passwd') --'", "read_text"),
        ("SELECT 'x'.read_text()", "read_text"),
    ],
    "mysql": [
        # Files.
        ("SELECT LOAD_FILE('/etc/passwd')", "load_file"),
        ("SELECT load_file(0x2f6574632f706173737764)", "load_file"),
        ("SELECT `load_file`('/etc/passwd')", "load_file"),
        ("SELECT LoAd_FiLe('/etc/passwd')", "load_file"),
        ("SELECT 1 UNION SELECT load_file('/etc/passwd')", "load_file"),
        ("SELECT * FROM orders INTO OUTFILE '/tmp/x'", None),
        ("SELECT * FROM orders INTO DUMPFILE '/tmp/x'", None),
        ("LOAD DATA INFILE '/etc/passwd' INTO TABLE t", None),
        # Locks.
        ("SELECT GET_LOCK('a', 10)", "get_lock"),
        ("SELECT RELEASE_LOCK('a')", "release_lock"),
        ("SELECT RELEASE_ALL_LOCKS()", "release_all_locks"),
        ("SELECT IS_FREE_LOCK('a')", "is_free_lock"),
        ("SELECT IS_USED_LOCK('a')", "is_used_lock"),
        ("SELECT * FROM orders FOR UPDATE", "lock"),
        ("SELECT * FROM orders LOCK IN SHARE MODE", "lock"),
        ("SELECT * FROM orders FOR SHARE", "lock"),
        ("LOCK TABLES orders WRITE", None),
        # Side effects and CPU burners.
        ("SELECT BENCHMARK(100000000, MD5('a'))", "benchmark"),
        ("SELECT MASTER_POS_WAIT('log.000001', 4)", "master_pos_wait"),
        ("SELECT SOURCE_POS_WAIT('log.000001', 4)", "source_pos_wait"),
        ("SELECT WAIT_FOR_EXECUTED_GTID_SET('x')", "wait_for_executed_gtid_set"),
        ("SELECT sys_exec('id')", "sys_exec"),
        ("SELECT sys_eval('id')", "sys_eval"),
        ("SELECT LAST_INSERT_ID(5)", "last_insert_id"),
        ("SELECT NAME_CONST('a', 1)", "name_const"),
        ("SELECT UUID_SHORT()", "uuid_short"),
        # Settings and variables.
        ("SELECT @@datadir", "@@datadir"),
        ("SELECT @@GLOBAL.secure_file_priv", "secure_file_priv"),
        ("SELECT @@basedir, @@tmpdir", "@@basedir"),
        ("SELECT @@session.max_execution_time", "max_execution_time"),
        ("SELECT @a := 1", "@a"),
        ("SELECT 1 INTO @x", "into"),
        ("SET GLOBAL max_connections = 1", "set"),
        ("SET SESSION TRANSACTION READ WRITE", "set"),
        ("SET STATEMENT max_statement_time = 0 FOR SELECT 1", "set"),
        ("SELECT /*+ SET_VAR(max_execution_time = 0) */ 1", "hint"),
        ("SELECT /*+ MAX_EXECUTION_TIME(0) */ * FROM orders", "hint"),
        ("SHOW VARIABLES", "show"),
        ("SHOW GRANTS", "show"),
        # System catalogs beyond the allowlist.
        ("SELECT * FROM mysql.user", "mysql.user"),
        ("SELECT * FROM `mysql`.`user`", "mysql.user"),
        ("SELECT * FROM MYSQL.USER", "mysql.user"),
        ("SELECT * FROM mysql.db", "mysql.db"),
        ("SELECT * FROM sys.session", "sys.session"),
        ("SELECT * FROM performance_schema.events_statements_history", "performance_schema"),
        ("SELECT * FROM performance_schema.global_variables", "performance_schema"),
        ("SELECT * FROM information_schema.processlist", "processlist"),
        ("SELECT * FROM information_schema.user_privileges", "user_privileges"),
        ("SELECT * FROM \uff4d\uff59\uff53\uff51\uff4c.user", "user"),  # full-width "mysql"
        ("SELECT * FROM orders JOIN mysql.user u ON true", "mysql.user"),
        ("SELECT (SELECT authentication_string FROM mysql.user LIMIT 1)", "mysql.user"),
        # Statements.
        ("DO SLEEP(1)", None),
        ("HANDLER orders OPEN", None),
        ("CALL p()", "call"),
        ("KILL 1", None),
        ("FLUSH PRIVILEGES", None),
        ("GRANT ALL ON *.* TO 'x'@'%'", None),
        ("CREATE FUNCTION sys_exec RETURNS STRING SONAME 'lib_mysqludf_sys.so'", None),
        ("SHUTDOWN", None),
        ("SELECT 1; DROP TABLE orders", "one statement"),
        # User-defined functions through a qualified name.
        ("SELECT shop.evil()", "shop.evil"),
        # Placeholders.
        ("SELECT * FROM orders WHERE id = ?", "placeholder"),
        # Quoting and comment tricks.
        ("SELECT 'a\\'' , load_file('/etc/passwd') -- '", "load_file"),
        ("SELECT extractvalue(1, concat(0x7e, (SELECT @@datadir)))", "extractvalue"),
        ("SELECT updatexml(1, concat(0x7e, version()), 1)", "updatexml"),
    ],
}

# Comment tricks that are not refused but neutralized: the SQL that runs has no hidden part.
NEUTRALIZED: list[tuple[str, str, str]] = [
    ("SELECT 1 /*!50000 , LOAD_FILE('/etc/passwd') */", "mysql", "SELECT 1"),
    ("SELECT 1 # ; DROP TABLE orders", "mysql", "SELECT 1"),
    ("SELECT /* /* nested */ pg_read_file('/etc/passwd') */ 1", "postgres", "SELECT 1"),
    ("SELECT 1 -- */ COPY orders TO '/tmp/x'", "duckdb", "SELECT 1"),
    ("SELECT /*+ SeqScan(orders) */ 1", "postgres", "SELECT 1"),
]


def test_at_least_fifty_hostile_queries_per_dialect() -> None:
    for dialect in ("duckdb", "postgres", "mysql"):
        assert len(HOSTILE[dialect]) >= 50, dialect


@pytest.mark.parametrize(
    ("dialect", "sql", "needle"),
    [(dialect, sql, needle) for dialect, cases in HOSTILE.items() for sql, needle in cases],
)
def test_hostile_query_is_refused(dialect: str, sql: str, needle: str | None) -> None:
    with pytest.raises(UnsafeSQLError) as raised:
        ensure_read_only(sql, dialect)
    if needle is not None:
        assert needle.lower() in raised.value.reason.lower()


@pytest.mark.parametrize(("sql", "dialect", "expected"), NEUTRALIZED)
def test_comment_tricks_are_neutralized(sql: str, dialect: str, expected: str) -> None:
    assert ensure_read_only(sql, dialect) == expected


def test_every_allowlisted_class_exists_in_this_sqlglot() -> None:
    """The allowlist resolves class names leniently; make sure none is silently missing here."""
    import inspect
    import re

    source = inspect.getsource(sql_allowlist)
    names = set()
    for block in re.findall(r"_classes\((.*?)\)", source, flags=re.S):
        names |= set(re.findall(r'"(\w+)"', block))
    missing = sorted(n for n in names if not isinstance(getattr(exp, n, None), type))
    assert not missing


def test_no_dangerous_name_is_allowlisted() -> None:
    dangerous = {
        name.lower()
        for cases in HOSTILE.values()
        for sql, name in cases
        if name and name.isidentifier() and f"{name.lower()}(" in sql.lower().replace("`", "")
    }
    assert {"ts_stat", "pg_read_file", "read_text", "load_file", "get_lock"} <= dangerous
    for dialect, names in sql_allowlist.FUNCTION_NAMES.items():
        assert not names & dangerous, dialect
        assert all(name.isascii() and name == name.lower() for name in names)
    assert not sql_allowlist.TABLE_ONLY_FUNCTION_NAMES["duckdb"] & dangerous


# --- property-based --------------------------------------------------------------------------

# Allowed building blocks per dialect; each "{}" is filled with a generated sub-expression.
_COMMON_TEMPLATES = [
    "{} + {}", "{} - {}", "{} * {}", "{} / NULLIF({}, 0)", "{} = {}", "{} <> {}", "{} < {}",
    "{} AND {}", "{} OR {}", "NOT {}", "{} IS NULL", "{} IN ({}, {})", "{} BETWEEN {} AND {}",
    "{} LIKE 'a%'", "CASE WHEN {} THEN {} ELSE {} END", "COALESCE({}, {})", "NULLIF({}, {})",
    "CAST({} AS VARCHAR(20))", "CAST({} AS DECIMAL(10, 2))", "count({})", "count(DISTINCT {})",
    "sum({})", "avg({})", "min({})", "max({})", "stddev({})", "variance({})", "abs({})",
    "round({}, 2)", "floor({})", "ceil({})", "sqrt(abs({}))", "power({}, 2)", "ln(abs({}) + 1)",
    "mod({}, 7)", "greatest({}, {})", "least({}, {})", "lower({})", "upper({})", "length({})",
    "trim({})", "substring({}, 1, 3)", "replace({}, 'a', 'b')", "concat({}, {})",
    "lpad({}, 5, '0')", "left({}, 2)", "reverse({})", "regexp_replace({}, 'a', 'b')",
    "EXTRACT(YEAR FROM {})", "row_number() OVER (PARTITION BY {} ORDER BY {})",
    "rank() OVER (ORDER BY {})", "lag({}) OVER (ORDER BY {})", "sum({}) OVER (PARTITION BY {})",
    "(SELECT max({}) FROM t2 WHERE {})", "EXISTS (SELECT 1 FROM t2 WHERE {})",
]  # fmt: skip
TEMPLATES: dict[str, list[str]] = {
    "postgres": _COMMON_TEMPLATES
    + [
        "{}::text", "{}::numeric(12, 2)", "date_trunc('month', {})", "date_part('dow', {})",
        "to_char({}, 'YYYY-MM')", "age({})", "string_agg({}, ',')", "array_agg({})",
        "percentile_cont(0.5) WITHIN GROUP (ORDER BY {})", "count(*) FILTER (WHERE {})",
        "bool_and({})", "split_part({}, ',', 1)", "initcap({})", "{}->>'a'", "{} @> '{{}}'",
        "jsonb_extract_path_text({}, 'a')", "jsonb_build_object('k', {})", "to_jsonb({})",
        "jsonb_array_length({})", "array_length(ARRAY[{}, {}], 1)", "cardinality(ARRAY[{}])",
        "generate_series({}, 3)", "regexp_match({}, 'a')", "format('%s-%s', {}, {})",
        "make_date(2024, 1, {})", "justify_days({})", "width_bucket({}, 0, 100, 10)",
        "pg_typeof({})", "to_tsvector('simple', {}) @@ to_tsquery('simple', 'a')",
        "ts_rank(to_tsvector({}), plainto_tsquery('a'))", "{} AT TIME ZONE 'UTC'",
        "num_nulls({}, {})", "gen_random_uuid()", "current_database()", "pg_size_pretty({})",
    ],
    "duckdb": _COMMON_TEMPLATES
    + [
        "{}::VARCHAR", "TRY_CAST({} AS INTEGER)", "date_trunc('month', {})", "strftime({}, '%Y')",
        "date_diff('day', {}, {})", "epoch_ms({})", "median({})", "quantile_cont({}, 0.9)",
        "arg_max({}, {})", "list({})", "string_agg({}, ',')", "count_if({})", "histogram({})",
        "if({}, {}, {})", "ifnull({}, {})", "list_transform([{}, {}], x -> x + 1)",
        "list_filter([{}], x -> x > 0)", "len([{}])", "[{}, {}][1]", "struct_pack(a := {})",
        "{{'a': {}}}.a", "json_extract_string({}, '$.a')", "{}->>'$.a'", "to_json({})",
        "regexp_extract({}, 'a')", "string_split({}, ',')", "starts_with({}, 'a')",
        "hash({})", "time_bucket(INTERVAL '1 day', {})", "make_date(2024, 1, {})",
        "unnest([{}])", "typeof({})", "COLUMNS('a.*')", "uuid()", "{} // 2",
    ],
    "mysql": _COMMON_TEMPLATES
    + [
        "IF({}, {}, {})", "IFNULL({}, {})", "DATE_FORMAT({}, '%Y-%m')", "DATEDIFF({}, {})",
        "TIMESTAMPDIFF(DAY, {}, {})", "DATE_ADD({}, INTERVAL 1 DAY)", "YEAR({})", "WEEK({}, 1)",
        "GROUP_CONCAT({} ORDER BY {} SEPARATOR ',')", "JSON_EXTRACT({}, '$.a')",
        "JSON_UNQUOTE(JSON_EXTRACT({}, '$.a'))", "{}->>'$.a'", "JSON_OBJECT('k', {})",
        "JSON_ARRAYAGG({})", "SUBSTRING_INDEX({}, ',', 1)", "LOCATE('a', {})",
        "FIND_IN_SET({}, 'a,b')", "CONCAT_WS('-', {}, {})", "FORMAT({}, 2)", "TRUNCATE({}, 1)",
        "CONVERT({}, CHAR)", "CAST({} AS SIGNED)", "STR_TO_DATE({}, '%Y-%m-%d')",
        "UNIX_TIMESTAMP({})", "LAST_DAY({})", "CRC32({})", "SHA2({}, 256)", "UUID()",
        "DATABASE()", "{} REGEXP 'a'", "{} DIV 2",
    ],
}  # fmt: skip
_LEAVES = ["amount", "region", "created_at", "t.amount", "1", "2.5", "'a'", "NULL", "TRUE"]

# Disallowed cores a property test hides somewhere in an otherwise allowed tree.
HOSTILE_CORES: dict[str, list[tuple[str, str]]] = {
    "postgres": [
        ("ts_stat('SELECT 1')", "ts_stat"),
        ("ts_rewrite('a'::tsquery, 'SELECT 1')", "ts_rewrite"),
        ("query_to_xml('SELECT 1', true, true, '')", "query_to_xml"),
        ("pg_read_file('/etc/passwd')", "pg_read_file"),
        ("pg_ls_dir('/')", "pg_ls_dir"),
        ("pg_terminate_backend(1)", "pg_terminate_backend"),
        ("pg_reload_conf()", "pg_reload_conf"),
        ("set_config('a', 'b', false)", "set_config"),
        ("current_setting('data_directory')", "current_setting"),
        ("pg_advisory_lock(1)", "pg_advisory_lock"),
        ("nextval('s')", "nextval"),
        ("lo_import('/etc/passwd')", "lo_import"),
        ("dblink('h', 'SELECT 1')", "dblink"),
        ("(SELECT max(rolpassword) FROM pg_authid)", "pg_authid"),
        ("(SELECT max(query) FROM pg_stat_activity)", "pg_stat_activity"),
    ],
    "duckdb": [
        ("read_text('/etc/passwd')", "read_text"),
        ("read_csv('/etc/passwd')", "read_csv"),
        ("query('SELECT 1')", "query"),
        ("getenv('HOME')", "getenv"),
        ("current_setting('temp_directory')", "current_setting"),
        ("getvariable('x')", "getvariable"),
        ("json_execute_serialized_sql('x')", "json_execute_serialized_sql"),
        ("nextval('s')", "nextval"),
        ("glob('/*')", "glob"),
        ("(SELECT max(path) FROM duckdb_databases())", "duckdb_databases"),
        ("(SELECT count(*) FROM 'data.csv')", "path"),
        ("(SELECT count(*) FROM data.csv)", "path"),
    ],
    "mysql": [
        ("load_file('/etc/passwd')", "load_file"),
        ("get_lock('a', 1)", "get_lock"),
        ("benchmark(1000, md5('a'))", "benchmark"),
        ("release_lock('a')", "release_lock"),
        ("sys_exec('id')", "sys_exec"),
        ("last_insert_id(1)", "last_insert_id"),
        ("extractvalue('<a/>', '/a')", "extractvalue"),
        ("@@datadir", "@@datadir"),
        ("(SELECT max(authentication_string) FROM mysql.user)", "mysql.user"),
        ("(SELECT max(info) FROM information_schema.processlist)", "processlist"),
    ],
}

_QUERY_SHAPES = [
    "SELECT {} AS c1 FROM t",
    "SELECT region, {} AS c1 FROM t GROUP BY region ORDER BY 2 DESC LIMIT 10",
    "SELECT * FROM t WHERE {}",
    "WITH q AS (SELECT {} AS v FROM t) SELECT v, count(*) FROM q GROUP BY v",
    "SELECT a FROM t UNION ALL SELECT {} FROM t2",
    "SELECT * FROM (SELECT {} AS v FROM t) AS s WHERE v IS NOT NULL",
    "SELECT t.a FROM t JOIN t2 ON t.id = t2.id AND {}",
    "SELECT a FROM t ORDER BY {}",
    "SELECT region, count(*) FROM t GROUP BY region HAVING {}",
]


def _slots(template: str) -> int:
    return sum(1 for _, field, _, _ in Formatter().parse(template) if field is not None)


def _fill(template: str, args: list[str]) -> str:
    return template.format(*(f"({arg})" for arg in args))


def _expressions(dialect: str) -> st.SearchStrategy[str]:
    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.sampled_from(TEMPLATES[dialect]).flatmap(
            lambda t: st.lists(children, min_size=_slots(t), max_size=_slots(t)).map(
                lambda args, t=t: _fill(t, args)
            )
        )

    return st.recursive(st.sampled_from(_LEAVES), extend, max_leaves=8)


def _hide(dialect: str, core: str) -> st.SearchStrategy[str]:
    """``core`` placed in a random slot of random allowed templates, a few levels deep."""
    frame = st.tuples(
        st.sampled_from(TEMPLATES[dialect]),
        st.integers(min_value=0, max_value=9),
        st.lists(_expressions(dialect), min_size=4, max_size=4),
    )

    def wrap(frames: list[tuple[str, int, list[str]]]) -> str:
        expression = core
        for template, position, others in frames:
            slots = _slots(template)
            if slots == 0:
                continue
            args = others[:slots]
            args[position % slots] = expression
            expression = _fill(template, args)
        return expression

    return st.lists(frame, max_size=3).map(wrap)


_PROPERTY_SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
@_PROPERTY_SETTINGS
@given(data=st.data())
def test_compositions_of_allowed_constructs_stay_allowed(dialect: str, data: st.DataObject) -> None:
    expression = data.draw(_expressions(dialect))
    sql = data.draw(st.sampled_from(_QUERY_SHAPES)).format(expression)
    normalized = ensure_read_only(sql, dialect)
    # What runs passes the guard again, and the row cap can be applied to it.
    assert ensure_read_only(normalized, dialect)
    assert with_row_limit(normalized, 100, dialect)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
@_PROPERTY_SETTINGS
@given(data=st.data())
def test_a_disallowed_function_anywhere_is_refused(dialect: str, data: st.DataObject) -> None:
    core, name = data.draw(st.sampled_from(HOSTILE_CORES[dialect]))
    expression = data.draw(_hide(dialect, core))
    sql = data.draw(st.sampled_from(_QUERY_SHAPES)).format(expression)
    with pytest.raises(UnsafeSQLError) as raised:
        ensure_read_only(sql, dialect)
    assert name in raised.value.reason.lower()


# --- nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_deep_nesting_is_a_clear_error_not_a_recursion_error(dialect: str) -> None:
    with pytest.raises(SQLParseError, match="nests brackets 200 levels"):
        ensure_read_only("SELECT " + "(" * 200 + "1" + ")" * 200, dialect)
    with pytest.raises(SQLParseError, match="nests brackets"):
        with_row_limit("SELECT " + "abs(" * 100 + "1" + ")" * 100, 10, dialect)
    # Deep trees without brackets: refused with the same kind of error, or accepted.
    for sql in ("SELECT " + "NOT " * 3000 + "TRUE", "SELECT " + " + ".join(["1"] * 5000)):
        try:
            ensure_read_only(sql, dialect)
        except SQLParseError as error:
            assert "nested too deeply" in str(error)
    assert ensure_read_only("SELECT " + "(" * 30 + "1" + ")" * 30, dialect)


async def test_deep_nesting_through_the_tool_is_invalid_parameters(tmp_path: Path) -> None:
    ctx = RunContext(thread_id="slack:T1:C1:1.1", data_dir=tmp_path, channel="C1", user="U1")
    tool = SqlQueryTool()
    with pytest.raises(ToolError) as raised:
        await tool.run(tool.Input(sql="SELECT " + "(" * 200 + "1" + ")" * 200), ctx)
    assert raised.value.error_type == ErrorType.INVALID_PARAMETERS
    assert "nests brackets" in str(raised.value)


# --- result size cap -------------------------------------------------------------------------


def test_fetch_capped_bounds_the_first_row() -> None:
    rows = iter([["x" * 5_000, 7, None], ["y" * 10, 1, None]])
    fetched, truncated = fetch_capped(lambda n: [r for _, r in zip(range(n), rows, strict=False)], 100, 1_000)
    assert truncated and len(fetched) == 1
    text, number, empty = fetched[0]
    assert number == 7 and empty is None
    assert text.startswith("x" * 990) and "value cut: 5,000 characters" in text
    assert row_size(fetched[0]) < 1_000 + 200  # the cap plus the note


def test_fetch_capped_asks_for_small_batches_while_rows_are_large() -> None:
    asked: list[int] = []
    source = iter([["x" * 400]] * 50)

    def fetchmany(n: int) -> list[list[str]]:
        asked.append(n)
        return [row for _, row in zip(range(n), source, strict=False)]

    fetched, truncated = fetch_capped(fetchmany, 1000, 2_000)
    assert truncated and len(fetched) == 5
    assert asked[0] == 1 and max(asked) <= 6


def test_cap_rows_keeps_small_results_unchanged() -> None:
    rows = [[1, "a"], [2, "b"]]
    assert cap_rows(rows, 1_000) == (rows, False)
    capped, cut = cap_rows([["z" * 3_000]], 1_000)
    assert cut and len(capped[0][0]) < 1_200


async def test_huge_first_value_through_the_tool_is_bounded(tmp_path: Path) -> None:
    ctx = RunContext(thread_id="slack:T1:C1:1.2", data_dir=tmp_path, channel="C1", user="U1")
    ensure_demo_database(demo_database(ctx))
    tool = SqlQueryTool(byte_cap=100_000)
    result = await tool.run(tool.Input(sql="SELECT repeat('x', 20000000) AS blob"), ctx)
    assert result.truncated and result.row_count == 1
    assert row_size(result.rows[0]) < 100_000 + 200
    assert "value cut: 20,000,000 characters" in result.rows[0][0]


# --- live: refused before execution ----------------------------------------------------------


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record (and fail) every attempt to connect to PostgreSQL or MySQL."""
    attempts: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        attempts.append("connect")
        raise AssertionError("the guard should have refused before connecting")

    monkeypatch.setattr(psycopg, "connect", refuse)
    monkeypatch.setattr(pymysql, "connect", refuse)
    return attempts


@pytest.fixture(scope="module")
def pg_source() -> Iterator[DataSourceConfig]:
    from tests.test_sources import _ensure_server, _start_postgres_command

    _ensure_server(5432, _start_postgres_command())
    yield DataSourceConfig(name="pg", url=PG_URL, statement_timeout_s=5)


@pytest.fixture(scope="module")
def mysql_source() -> Iterator[DataSourceConfig]:
    from tests.test_sources import _ensure_server

    _ensure_server(
        3306,
        ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"],
    )
    yield DataSourceConfig(name="shop", url=MYSQL_URL, statement_timeout_s=5)


LIVE_POSTGRES = [
    TS_STAT_EXPLOIT,
    "SELECT ts_rewrite('a'::tsquery, 'SELECT pg_reload_conf()::text::tsquery')",
    "SELECT (ts_stat('SELECT to_tsvector(pg_terminate_backend(pid)::text) FROM pg_stat_activity "
    "WHERE pid <> pg_backend_pid()')).word",
    "SELECT pg_ls_dir('/')",
    "SELECT current_setting('data_directory')",
    "SELECT pg_advisory_lock(4242)",
    "SELECT rolname, rolpassword FROM pg_authid",
    "SELECT * FROM pg_settings",
]
LIVE_MYSQL = [
    "SELECT @@datadir",
    "SELECT LOAD_FILE('/etc/passwd')",
    "SELECT GET_LOCK('ba_test', 1)",
    "SELECT user, authentication_string FROM mysql.user",
    "SELECT /*+ MAX_EXECUTION_TIME(0) */ 1",
    "SELECT * FROM information_schema.processlist",
]


def test_live_postgres_hostile_queries_are_refused_before_execution(
    pg_source: DataSourceConfig, no_connections: list[str]
) -> None:
    for sql in LIVE_POSTGRES:
        with pytest.raises(UnsafeSQLError):
            query_source(pg_source, sql)
    assert no_connections == []


def test_live_postgres_ts_stat_exploit_is_real_without_the_guard(
    pg_source: DataSourceConfig,
) -> None:
    """The local role is a superuser: without the guard the issue's query reads the file."""
    try:
        result = _execute_on_source(pg_source, TS_STAT_EXPLOIT, 100, 1_000_000, 5)
    except QueryFailed as error:  # e.g. a server without the permission: nothing to show
        pytest.skip(f"the exploit does not run here: {error}")
    assert any("root:" in str(row[0]) for row in result.rows)
    with pytest.raises(UnsafeSQLError, match="ts_stat"):
        query_source(pg_source, TS_STAT_EXPLOIT)


def test_live_mysql_hostile_queries_are_refused_before_execution(
    mysql_source: DataSourceConfig, no_connections: list[str]
) -> None:
    for sql in LIVE_MYSQL:
        with pytest.raises(UnsafeSQLError):
            query_source(mysql_source, sql)
    assert no_connections == []


def test_live_mysql_datadir_is_real_without_the_guard(mysql_source: DataSourceConfig) -> None:
    result = _execute_on_source(mysql_source, "SELECT @@datadir", 10, 10_000, 5)
    assert str(result.rows[0][0]).startswith("/")
    with pytest.raises(UnsafeSQLError, match="datadir"):
        query_source(mysql_source, "SELECT @@datadir")


def test_live_mysql_quoting_trick_runs_only_as_checked(mysql_source: DataSourceConfig) -> None:
    """A backslash-quote string: what runs is the regenerated SQL, which reads no file."""
    sql = "SELECT 'a\\' , load_file('/etc/passwd') -- ' AS s"
    try:
        result = query_source(mysql_source, sql)
    except (UnsafeSQLError, QueryFailed):
        return
    assert all("root:" not in str(value) for row in result.rows for value in row)


def test_duckdb_file_name_is_refused_by_the_guard_not_by_duckdb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.csv").write_text("secret\nhunter2\n", encoding="utf-8")
    (tmp_path / "x.parquet").write_bytes(b"")
    for sql in (
        "SELECT * FROM data.csv",
        'SELECT * FROM "data.csv"',
        f'SELECT * FROM "{tmp_path}/data".csv',
        "SELECT * FROM 'data.csv'",
        "SELECT * FROM read_csv('data.csv')",
        "SELECT * FROM duckdb_databases()",
        "SELECT current_setting('temp_directory')",
    ):
        with pytest.raises(UnsafeSQLError):
            run_duckdb_query(None, sql)
    assert os.getcwd() == str(tmp_path)


def test_mysql_live_result_cap_bounds_the_first_row(mysql_source: DataSourceConfig) -> None:
    result = query_source(mysql_source, "SELECT repeat('x', 3000000) AS blob", byte_cap=100_000)
    assert result.truncated and result.row_count == 1
    assert row_size(result.rows[0]) < 100_000 + 200


def test_postgres_live_result_cap_bounds_the_first_row(pg_source: DataSourceConfig) -> None:
    result = query_source(pg_source, "SELECT repeat('x', 20000000) AS blob")
    assert result.truncated and result.row_count == 1
    assert row_size(result.rows[0]) < 1_000_000 + 200
    assert "value cut: 20,000,000 characters" in result.rows[0][0]
    # Many large rows: the stream stops early instead of transferring them all.
    many = query_source(
        pg_source,
        "SELECT g, repeat('y', 300000) AS blob FROM generate_series(1, 1000) AS g",
        row_cap=1000,
    )
    assert many.truncated and many.row_count == 3
    assert sum(row_size(row) for row in many.rows) <= 1_000_000


