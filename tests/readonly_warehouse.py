"""Warehouses for end-to-end tests: a PostgreSQL schema or a MariaDB database that the test
fills, read through a login that may only read it, as the README tells operators to set up."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pymysql

from tests.test_sources import PG_URL, _ensure_server, _start_postgres_command

_START_MARIADB = ["start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd"]


@contextmanager
def postgres_readonly(
    prefix: str, fill: Callable[[psycopg.Connection, str], None], *, search_path: bool = True
) -> Iterator[tuple[str, str]]:
    """A schema named ``prefix_…`` filled by ``fill(conn, schema)`` and a role that may only
    read it (its search_path set there unless ``search_path`` is False): (URL, schema)."""
    _ensure_server(5432, _start_postgres_command())
    suffix = uuid.uuid4().hex[:8]
    schema, role = f"{prefix}_{suffix}", f"ba_ro_{suffix}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        fill(conn, schema)
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        if search_path:
            conn.execute(f"ALTER ROLE {role} SET search_path = {schema}")
    try:
        yield f"postgresql://{role}@127.0.0.1:5432/test", schema
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute(f"DROP ROLE {role}")


@contextmanager
def mariadb_readonly(prefix: str, fill: Callable[[Any, str], None]) -> Iterator[tuple[str, str]]:
    """A database named ``prefix_…`` filled by ``fill(cursor, database)`` and a user that may
    only SELECT from it: (URL, database)."""
    _ensure_server(3306, _START_MARIADB)
    suffix = uuid.uuid4().hex[:8]
    database, user = f"{prefix}_{suffix}", f"ba_ro_{suffix}"
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {database}")
        fill(cur, database)
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'ro-pass'")
        cur.execute(f"GRANT SELECT ON {database}.* TO '{user}'@'%'")
    try:
        yield f"mysql://{user}:ro-pass@127.0.0.1:3306/{database}", database
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE {database}")
            cur.execute(f"DROP USER '{user}'@'%'")
        conn.close()
