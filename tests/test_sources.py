"""Operator-configured sources against the real PostgreSQL and MariaDB servers of this machine.

If a server is down the fixtures start it (as CI would need) instead of skipping.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import psycopg
import pymysql
import pytest

from agent_core.data.errors import (
    DataSourceConfigError,
    QueryFailed,
    QueryTimeout,
    TableNotFound,
    UnsafeSQLError,
)
from agent_core.data.privileges import check_source_privileges
from agent_core.data.source_config import DataSourceConfig, is_allowed, parse_datasources
from agent_core.data.sources import (
    _execute_on_source,
    describe_source_table,
    list_source_tables,
    query_source,
)
from agent_core.governance.availability import PrivilegedSourceError, verify_sources
from tests.waiting import Deadline, scaled

PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
MYSQL_URL = "mysql://root@127.0.0.1:3306/test"


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(scaled(1))
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _ensure_server(port: int, start_command: list[str]) -> None:
    if _port_open(port):
        return
    subprocess.run(start_command, check=False, capture_output=True, timeout=scaled(60))
    deadline = Deadline(60)
    while not _port_open(port):
        if deadline.passed():
            pytest.fail(f"database server on port {port} did not start: {' '.join(start_command)}")
        time.sleep(0.5)
    time.sleep(1)  # the port opens slightly before the server accepts logins


def _start_postgres_command() -> list[str]:
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    return ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"]


@pytest.fixture(scope="module")
def pg_table() -> Iterator[tuple[DataSourceConfig, str]]:
    """A throw-away schema with a 200-row table in database ``test``."""
    _ensure_server(5432, _start_postgres_command())
    schema = f"ba_test_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.orders (id int PRIMARY KEY, region text NOT NULL, "
            f"gmv numeric(12, 2))"
        )
        conn.execute(
            f"INSERT INTO {schema}.orders SELECT g, 'r' || (g % 5), g * 1.25 "
            f"FROM generate_series(1, 200) g"
        )
    cfg = DataSourceConfig(name="pg", url=PG_URL, statement_timeout_s=1)
    try:
        yield cfg, schema
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="module")
def mysql_table() -> Iterator[tuple[DataSourceConfig, str]]:
    """A throw-away 200-row table in MariaDB database ``test``."""
    _ensure_server(
        3306,
        [
            "start-stop-daemon",
            "--start",
            "--oknodo",
            "--background",
            "--exec",
            "/usr/sbin/mariadbd",
        ],
    )
    table = f"ba_test_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(
        host="127.0.0.1", port=3306, user="root", password="", database="test", autocommit=True
    )
    with conn.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, region VARCHAR(20), gmv DECIMAL(12, 2))"
        )
        cursor.executemany(
            f"INSERT INTO {table} VALUES (%s, %s, %s)",
            [(i, f"r{i % 5}", i * 1.25) for i in range(1, 201)],
        )
    cfg = DataSourceConfig(name="shop", url=MYSQL_URL, statement_timeout_s=1)
    try:
        yield cfg, table
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP TABLE {table}")
        conn.close()


# --- configuration ---------------------------------------------------------------------------


def test_parse_datasources() -> None:
    sources = parse_datasources(
        '{"warehouse": {"url": "postgresql+psycopg://reader:s3cret@db:5432/dw", "row_cap": 50,'
        ' "allowed_channels": ["C1"], "description": "Finance"},'
        ' "shop": "mysql://ro@127.0.0.1/shop", "archive": "duckdb:///srv/a.duckdb",'
        ' "local": "/srv/b.duckdb"}'
    )
    assert {name: cfg.kind for name, cfg in sources.items()} == {
        "warehouse": "postgresql",
        "shop": "mysql",
        "archive": "duckdb",
        "local": "duckdb",
    }
    warehouse = sources["warehouse"]
    assert warehouse.name == "warehouse" and warehouse.row_cap == 50
    assert "s3cret" not in warehouse.safe_url and "***" in warehouse.safe_url
    assert parse_datasources("") == {} and parse_datasources(None) == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ('["postgresql://x"]', "JSON object"),
        ('{"bad": 42}', "'bad'"),
        ('{"lite": "sqlite:///x.db"}', "'lite'.*unsupported database type"),
        ('{"pg": {"url": "postgresql://x/db", "row_cap": 0}}', "'pg'.*row_cap"),
        ('{"pg": {"dsn": "postgresql://x/db"}}', "'pg'.*url"),
        ('{"Bad Name": "postgresql://x/db"}', "'Bad Name'.*name"),
        ('{"rel": "duckdb:relative.duckdb"}', "'rel'.*absolute"),
    ],
)
def test_parse_datasources_errors_name_the_source(raw: str, message: str) -> None:
    with pytest.raises(DataSourceConfigError, match=message):
        parse_datasources(raw)


def test_allowlists() -> None:
    open_source = DataSourceConfig(name="a", url=PG_URL)
    assert is_allowed(open_source, "C1", "U1") and is_allowed(open_source, None, None)
    restricted = DataSourceConfig(
        name="b", url=PG_URL, allowed_channels=["C1"], allowed_users=["U1", "U2"]
    )
    assert is_allowed(restricted, "C1", "U2")
    assert not is_allowed(restricted, "C2", "U1")
    assert not is_allowed(restricted, "C1", "U3")
    assert not is_allowed(restricted, None, "U1")
    nobody = DataSourceConfig(name="c", url=PG_URL, allowed_users=[])
    assert not is_allowed(nobody, "C1", "U1")


# --- PostgreSQL ------------------------------------------------------------------------------


def test_postgres_query_and_row_cap(pg_table: tuple[DataSourceConfig, str]) -> None:
    cfg, schema = pg_table
    result = query_source(
        cfg, f"SELECT id, region, gmv FROM {schema}.orders ORDER BY id", row_cap=10
    )
    assert result.columns == ["id", "region", "gmv"]
    assert result.column_types == ["int4", "text", "numeric"]
    assert result.row_count == 10 and result.truncated and result.rows[0][0] == 1
    whole = query_source(cfg, f"SELECT count(*) FROM {schema}.orders")
    assert whole.rows == [[200]] and not whole.truncated
    # The source's own cap wins over a larger request.
    tight = cfg.model_copy(update={"row_cap": 3})
    assert query_source(tight, f"SELECT * FROM {schema}.orders", row_cap=100).row_count == 3


def test_postgres_guard_and_read_only_session(pg_table: tuple[DataSourceConfig, str]) -> None:
    cfg, schema = pg_table
    with pytest.raises(UnsafeSQLError):
        query_source(cfg, f"UPDATE {schema}.orders SET gmv = 0")
    # Smuggled past the guard: the read-only session itself refuses the writes.
    for sql in (
        f"UPDATE {schema}.orders SET gmv = 0",
        f"WITH d AS (DELETE FROM {schema}.orders RETURNING id) SELECT count(*) FROM d",
        f"CREATE TABLE {schema}.evil (a int)",
    ):
        with pytest.raises(QueryFailed, match="read-only transaction"):
            _execute_on_source(cfg, sql, 10, 10_000, 5)
    # A second statement never runs: the executor sends exactly one statement per call.
    with pytest.raises(QueryFailed, match="multiple commands"):
        _execute_on_source(
            cfg,
            "SELECT set_config('default_transaction_read_only', 'off', false); "
            f"UPDATE {schema}.orders SET gmv = 0",
            10,
            10_000,
            5,
        )
    assert query_source(cfg, f"SELECT count(*), min(gmv) FROM {schema}.orders").rows == [
        [200, pytest.approx(1.25)]
    ]


def test_postgres_statement_timeout(pg_table: tuple[DataSourceConfig, str]) -> None:
    cfg, _ = pg_table
    started = time.monotonic()
    with pytest.raises(QueryTimeout, match="1 s"):
        query_source(cfg, "SELECT count(*) FROM generate_series(1, 10000000000)")
    assert time.monotonic() - started < scaled(4)  # the limit applied, not a default of minutes


def test_postgres_catalog(pg_table: tuple[DataSourceConfig, str]) -> None:
    cfg, schema = pg_table
    assert [(t.schema_name, t.name, t.kind) for t in list_source_tables(cfg, schema)] == [
        (schema, "orders", "table")
    ]
    assert (schema, "orders") in {(t.schema_name, t.name) for t in list_source_tables(cfg)}
    description = describe_source_table(cfg, "orders", schema)
    assert [(c.name, c.nullable) for c in description.columns] == [
        ("id", False),
        ("region", False),
        ("gmv", True),
    ]
    with pytest.raises(TableNotFound):
        describe_source_table(cfg, "orders; DROP TABLE x", schema)


# --- MariaDB / MySQL -------------------------------------------------------------------------


def test_mysql_query_and_row_cap(mysql_table: tuple[DataSourceConfig, str]) -> None:
    cfg, table = mysql_table
    result = query_source(cfg, f"SELECT id, region, gmv FROM {table} ORDER BY id", row_cap=10)
    assert result.columns == ["id", "region", "gmv"] and result.column_types[0] == "LONG"
    assert result.row_count == 10 and result.truncated
    assert query_source(cfg, f"SELECT count(*) AS n FROM {table}").rows == [[200]]


def test_mysql_guard_and_read_only_session(mysql_table: tuple[DataSourceConfig, str]) -> None:
    cfg, table = mysql_table
    with pytest.raises(UnsafeSQLError):
        query_source(cfg, f"DELETE FROM {table}")
    for sql in (
        f"UPDATE {table} SET gmv = 0",
        f"DELETE FROM {table}",
        f"INSERT INTO {table} VALUES (999, 'x', 1)",
    ):
        with pytest.raises(QueryFailed, match="READ ONLY"):
            _execute_on_source(cfg, sql, 10, 10_000, 5)
    assert query_source(cfg, f"SELECT count(*), min(gmv) FROM {table}").rows == [
        [200, pytest.approx(1.25)]
    ]


def test_mysql_statement_timeout(mysql_table: tuple[DataSourceConfig, str]) -> None:
    cfg, _ = mysql_table
    started = time.monotonic()
    with pytest.raises(QueryTimeout):
        query_source(
            cfg,
            "SELECT count(*) FROM information_schema.columns a, information_schema.columns b, "
            "information_schema.columns c, information_schema.columns d",
        )
    assert time.monotonic() - started < scaled(4)  # the limit applied, not a default of minutes


def test_mysql_catalog(mysql_table: tuple[DataSourceConfig, str]) -> None:
    cfg, table = mysql_table
    assert ("test", table, "table") in {
        (t.schema_name, t.name, t.kind) for t in list_source_tables(cfg)
    }
    description = describe_source_table(cfg, table)
    assert [c.name for c in description.columns] == ["id", "region", "gmv"]


# --- DuckDB file ------------------------------------------------------------------------------


def test_duckdb_source(tmp_path: Path) -> None:
    path = tmp_path / "archive.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE events AS SELECT range AS id, range % 3 AS kind FROM range(50)")
    cfg = parse_datasources(f'{{"archive": "duckdb://{path}"}}')["archive"]
    assert query_source(cfg, "SELECT count(*) FROM events").rows == [[50]]
    capped = query_source(cfg, "SELECT * FROM events", row_cap=4)
    assert capped.row_count == 4 and capped.truncated
    with pytest.raises(UnsafeSQLError):
        query_source(cfg, "DELETE FROM events")
    assert [(t.name, t.kind) for t in list_source_tables(cfg)] == [("events", "table")]
    description = describe_source_table(cfg, "events")
    assert [c.name for c in description.columns] == ["id", "kind"]
    missing = cfg.model_copy(update={"url": f"duckdb://{tmp_path / 'missing.duckdb'}"})
    with pytest.raises(QueryFailed, match="does not exist"):
        query_source(missing, "SELECT 1")


# --- role privileges (start-up check) ---------------------------------------------------------


@pytest.fixture
def pg_reader(pg_table: tuple[DataSourceConfig, str]) -> Iterator[tuple[DataSourceConfig, str]]:
    """A real read-only login role: USAGE on the test schema, SELECT on its tables."""
    _, schema = pg_table
    role = f"ba_ro_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
    cfg = DataSourceConfig(
        name="pgro", url=f"postgresql://{role}@127.0.0.1:5432/test", statement_timeout_s=5
    )
    try:
        yield cfg, role
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")


def test_postgres_superuser_source_is_refused_at_start_up(
    pg_table: tuple[DataSourceConfig, str],
) -> None:
    cfg, _ = pg_table
    problems = check_source_privileges(cfg)
    assert len(problems) == 1 and "superuser (rolsuper)" in problems[0]
    with pytest.raises(PrivilegedSourceError) as raised:
        verify_sources({"pg": cfg}, logging.getLogger("test"))
    message = str(raised.value)
    for needle in (
        "'pg'",
        "superuser",
        "CREATE ROLE ba_reader LOGIN",
        "GRANT SELECT ON ALL TABLES IN SCHEMA",
        '"allow_privileged": true',
    ):
        assert needle in message
    assert raised.value.problems == {"pg": problems}
    assert isinstance(raised.value, DataSourceConfigError)


def test_postgres_read_only_role_is_accepted_and_can_query(
    pg_table: tuple[DataSourceConfig, str], pg_reader: tuple[DataSourceConfig, str]
) -> None:
    _, schema = pg_table
    reader, _ = pg_reader
    assert check_source_privileges(reader) == []
    assert verify_sources([reader]) == {}
    assert query_source(reader, f"SELECT count(*) FROM {schema}.orders").rows == [[200]]
    # Even if the guard were bypassed, this role cannot read server files.
    with pytest.raises(QueryFailed, match="permission denied"):
        _execute_on_source(reader, "SELECT pg_read_file('/etc/passwd')", 10, 10_000, 5)


@pytest.mark.parametrize(
    ("grant", "needle"),
    [
        ("GRANT INSERT ON {schema}.orders TO {role}", "write privileges"),
        ("GRANT UPDATE (gmv) ON {schema}.orders TO {role}", "write privileges"),
        ("GRANT CREATE ON SCHEMA {schema} TO {role}", "CREATE on the schema"),
        ("GRANT pg_read_server_files TO {role}", "pg_read_server_files"),
        ("GRANT pg_signal_backend TO {role}", "pg_signal_backend"),
        ("GRANT pg_monitor TO {role}", "pg_read_all_settings"),
        ("ALTER ROLE {role} CREATEROLE", "CREATEROLE"),
        ("GRANT CREATE ON DATABASE test TO {role}", "CREATE on the database"),
    ],
)
def test_postgres_role_that_can_do_more_than_read_is_refused(
    pg_table: tuple[DataSourceConfig, str],
    pg_reader: tuple[DataSourceConfig, str],
    grant: str,
    needle: str,
) -> None:
    _, schema = pg_table
    reader, role = pg_reader
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(grant.format(schema=schema, role=role))
    try:
        problems = check_source_privileges(reader)
        assert any(needle in problem for problem in problems), problems
        with pytest.raises(PrivilegedSourceError, match=needle):
            verify_sources([reader])
    finally:
        if "DATABASE" in grant:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"REVOKE CREATE ON DATABASE test FROM {role}")


def test_privileged_source_with_override_is_logged_on_every_start(
    pg_table: tuple[DataSourceConfig, str], caplog: pytest.LogCaptureFixture
) -> None:
    cfg, _ = pg_table
    allowed = cfg.model_copy(update={"allow_privileged": True})
    logger = logging.getLogger("test.privileges")
    with caplog.at_level(logging.WARNING, logger="test.privileges"):
        for _ in range(2):
            assert verify_sources({"pg": allowed}, logger) == {
                "pg": check_source_privileges(cfg)
            }
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "'pg'" in warnings[0].getMessage() and "superuser" in warnings[0].getMessage()
    assert "allow_privileged" in warnings[0].getMessage()


def test_unreachable_source_is_logged_or_refused_when_strict(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = DataSourceConfig(name="down", url="postgresql://ro@127.0.0.1:1/test")
    with caplog.at_level(logging.WARNING):
        assert verify_sources([down]) == {}
    assert any("could not check" in r.getMessage() for r in caplog.records)
    with pytest.raises(PrivilegedSourceError, match="could not be checked"):
        verify_sources([down], strict=True)


def test_duckdb_source_needs_no_privilege_check(tmp_path: Path) -> None:
    cfg = DataSourceConfig(name="archive", url=f"duckdb://{tmp_path / 'a.duckdb'}")
    assert check_source_privileges(cfg) == []


def test_allow_privileged_is_parsed_from_the_configuration() -> None:
    sources = parse_datasources(
        '{"a": {"url": "postgresql://x/db", "allow_privileged": true}, "b": "mysql://y/db"}'
    )
    assert sources["a"].allow_privileged and not sources["b"].allow_privileged


@pytest.fixture
def mysql_reader(mysql_table: tuple[DataSourceConfig, str]) -> Iterator[tuple[DataSourceConfig, str]]:
    """A real read-only MariaDB account: SELECT on database ``test``."""
    user = f"ba_ro_{uuid.uuid4().hex[:8]}"
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    with conn.cursor() as cursor:
        cursor.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'")
        cursor.execute(f"GRANT SELECT, SHOW VIEW ON `test`.* TO '{user}'@'%'")
    cfg = DataSourceConfig(
        name="shopro",
        url=f"mysql://{user}:pw-{user}@127.0.0.1:3306/test",
        statement_timeout_s=5,
    )
    try:
        yield cfg, user
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cursor.execute(f"DROP ROLE IF EXISTS {user}_role")
        conn.close()


def _mysql_root(sql: str) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    finally:
        conn.close()


def test_mysql_root_is_refused_at_start_up(mysql_table: tuple[DataSourceConfig, str]) -> None:
    cfg, _ = mysql_table
    with pytest.raises(PrivilegedSourceError) as raised:
        verify_sources({"shop": cfg})
    message = str(raised.value)
    assert "'shop'" in message and "ALL PRIVILEGES on *.*" in message
    assert "FILE" in message and "CREATE USER 'ba_reader'@'%'" in message
    assert "GRANT SELECT, SHOW VIEW ON `test`.*" in message


def test_mysql_read_only_account_is_accepted(
    mysql_table: tuple[DataSourceConfig, str], mysql_reader: tuple[DataSourceConfig, str]
) -> None:
    _, table = mysql_table
    reader, _ = mysql_reader
    assert check_source_privileges(reader) == []
    assert verify_sources([reader]) == {}
    assert query_source(reader, f"SELECT count(*) FROM {table}").rows == [[200]]


@pytest.mark.parametrize(
    ("grant", "needle"),
    [
        ("GRANT FILE ON *.* TO '{user}'@'%'", "FILE on *.*"),
        ("GRANT INSERT, UPDATE ON `test`.* TO '{user}'@'%'", "INSERT on `test`.*"),
        ("GRANT PROCESS ON *.* TO '{user}'@'%'", "PROCESS"),
        ("GRANT SELECT ON `test`.* TO '{user}'@'%' WITH GRANT OPTION", "WITH GRANT OPTION"),
        (
            "CREATE ROLE {user}_role; GRANT DELETE ON `test`.* TO {user}_role; "
            "GRANT {user}_role TO '{user}'@'%'",
            "DELETE on `test`.*",
        ),
    ],
)
def test_mysql_account_that_can_do_more_than_read_is_refused(
    mysql_reader: tuple[DataSourceConfig, str], grant: str, needle: str
) -> None:
    reader, user = mysql_reader
    for statement in grant.format(user=user).split("; "):
        _mysql_root(statement)
    problems = check_source_privileges(reader)
    assert any(needle in problem for problem in problems), problems
    with pytest.raises(PrivilegedSourceError, match=re.escape(needle)):
        verify_sources([reader])
