"""Shared fixtures: a fresh database per test on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from gateway.migrate import upgrade
from tests.waiting import scaled

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get("BA_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def postgres_available() -> str:
    """PostgreSQL on 127.0.0.1:5432, started if it is down (never skipped)."""
    try:
        psycopg.connect(_pg_dsn(PG_ADMIN_URL), connect_timeout=round(scaled(3))).close()
    except psycopg.OperationalError:
        subprocess.run([str(ROOT / "scripts" / "ensure-postgres.sh")], check=True)
    return PG_ADMIN_URL


def _new_schema(admin_url: str) -> tuple[str, str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    # Each test gets its own schema through the search path: isolated and cheap to create.
    return schema, f"{admin_url}?options=-csearch_path%3D{schema}"


def _drop_schema(admin_url: str, schema: str) -> None:
    with psycopg.connect(_pg_dsn(admin_url), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty, migrated database: SQLite in a temp dir, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'test.db'}"
        upgrade(url)
        yield url
        return
    admin_url = request.getfixturevalue("postgres_available")
    schema, url = _new_schema(admin_url)
    try:
        upgrade(url)
        yield url
    finally:
        _drop_schema(admin_url, schema)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator:
    from agent_core.store.db import create_engine

    eng = create_engine(database_url)
    yield eng
    await eng.dispose()


@pytest.fixture
async def inbox(engine) -> AsyncIterator:
    from gateway.service.inbox import Inbox

    box = Inbox(engine)
    yield box
    await box.close()
