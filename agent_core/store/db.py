"""Database engines from plain URLs. The project picks the drivers: aiosqlite and psycopg."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession


class UnsupportedDatabase(ValueError):
    """DATABASE_URL names a database this service does not run on."""


def _normalise(url: str, *, is_async: bool) -> URL:
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        return parsed.set(drivername="sqlite+aiosqlite" if is_async else "sqlite")
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    raise UnsupportedDatabase(f"DATABASE_URL: unsupported database {backend!r} (use sqlite or postgresql)")


def sync_url(url: str) -> URL:
    """The URL for synchronous use (Alembic migrations)."""
    return _normalise(url, is_async=False)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI callback
    cursor = dbapi_connection.cursor()
    # WAL with synchronous=NORMAL: a commit is in the WAL file before we acknowledge, so it
    # survives a crash of this process; only a power loss can take the last commits with it
    # (run PostgreSQL where that matters). busy_timeout covers other processes (the CLI).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def create_engine(url: str) -> AsyncEngine:
    """An async engine for `url` (plain sqlite:/// or postgresql:// URLs are fine)."""
    normalised = _normalise(url, is_async=True)
    if normalised.get_backend_name() == "sqlite":
        # One connection: SQLite has one writer at a time anyway, and queueing in the pool
        # (async, FIFO) is far cheaper than SQLite's lock-retry sleeps of up to 100 ms.
        engine = create_async_engine(normalised, pool_size=1, max_overflow=0)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(normalised, pool_size=10, max_overflow=10, pool_pre_ping=True)


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)
