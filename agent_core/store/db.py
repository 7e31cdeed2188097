"""Database engines from plain URLs. The project picks the drivers: aiosqlite and psycopg."""

from __future__ import annotations

import asyncio
import gc
import logging
import sqlite3
import time
from contextlib import closing, suppress
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy import Table, event, insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel import SQLModel
from sqlmodel.ext.asyncio.session import AsyncSession

log = logging.getLogger(__name__)

# The WAL is reset once this much has been written to it since the last reset (sooner when a
# checkpoint finds a pause in the writes). Its file is cut back to twice this when a writer
# resets it (`journal_size_limit`): a bounded file whose space writers reuse, and which a
# reset at the usual size does not truncate. Each reset costs the writer that starts the WAL
# again an fsync of its header while it holds the write lock (0.4 ms mostly, 130 ms seen on
# this machine's disk): under the ingest bench's 13 MB/s of WAL, every 20 s at this size
# rather than every 5 s at 64 MB.
WAL_RESET_BYTES = 256 * 1024**2
# A WAL past the reset size is checkpointed again, up to this many times this far apart, for a
# writer to find it wholly copied and reset it (see `sqlite_checkpointer`).
RESET_TRIES = 50
RESET_PAUSE_S = 0.002
# How long a RESTART checkpoint, holding the write lock, waits for readers to move on. SQLite's
# busy handler sleeps in growing steps, so 10 ms means at most three short sleeps.
RESET_BUSY_S = 0.01


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


def sqlite_pragmas(dbapi_connection, _record) -> None:  # DBAPI callback
    """Settings every SQLite connection of the service uses (an SQLAlchemy "connect" listener)."""
    cursor = dbapi_connection.cursor()
    # WAL with synchronous=NORMAL: a commit is in the WAL file before we acknowledge, so it
    # survives a crash of this process; only a power loss can take the last commits with it
    # (BA_INBOX_DURABILITY=flush syncs the inbox's commits). busy_timeout covers other
    # processes (the CLI).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    # Checkpoints fsync the database: `sqlite_checkpointer` runs them off the event loop
    # instead of inside whichever commit crosses the threshold.
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.execute(f"PRAGMA journal_size_limit={2 * WAL_RESET_BYTES}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class _InlineSQLiteConnection(aiosqlite.Connection):
    """aiosqlite's API, executed on the calling (event loop) thread.

    An embedded SQLite statement takes tens of microseconds; handing each one to a worker
    thread and back (aiosqlite's design) costs more than that and adds GIL hand-off jitter.
    Safe because the process uses one connection (see `create_engine`), so a statement never
    waits for a lock held by a coroutine this very loop must run; and no transaction of the
    service awaits anything but the database, so another process (a worker, the CLI) holds
    the write lock only for the moment one transaction takes.
    """

    async def _execute(self, fn, *args, **kwargs):
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    async def _connect(self) -> _InlineSQLiteConnection:
        if self._connection is None:
            self._connection = self._connector()
        return self

    def __await__(self):  # no worker thread to start
        return self._connect().__await__()

    def stop(self) -> None:
        self._running = False
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def create_engine(url: str) -> AsyncEngine:
    """An async engine for `url` (plain sqlite:/// or postgresql:// URLs are fine)."""
    normalised = _normalise(url, is_async=True)
    if normalised.get_backend_name() == "sqlite":
        database = normalised.database or ":memory:"

        async def connect() -> _InlineSQLiteConnection:
            return await _InlineSQLiteConnection(
                partial(sqlite3.connect, database, check_same_thread=False), iter_chunk_size=64
            )

        # One connection per process: SQLite has one writer at a time anyway; coroutines queue
        # for it in the pool instead of in SQLite's lock-retry sleeps.
        engine = create_async_engine(
            normalised, pool_size=1, max_overflow=0, async_creator=connect, hide_parameters=True
        )
        event.listen(engine.sync_engine, "connect", sqlite_pragmas)
        hold_collector_in_transactions(engine)
        return engine
    # hide_parameters: a failed statement's error must not carry message text into the logs.
    return create_async_engine(
        normalised, pool_size=10, max_overflow=10, pool_pre_ping=True, hide_parameters=True
    )


def hold_collector_in_transactions(engine: AsyncEngine) -> None:
    """Keep Python's cyclic garbage collector from running inside `engine`'s transactions.

    A SQLite transaction holds the database's write lock from its first write to its commit,
    and every other process's writes wait for it, serve's acknowledgements among them. A full
    collection in a worker whose heap has grown with its conversations took 209 ms there
    (ingest bench), and landing inside a transaction it held every acknowledgement for as
    long. Transactions take well under a millisecond of Python: the collection the allocations
    in one would have started runs at the first allocation after it. The collector's state
    before the transaction is restored (a command may have turned it off itself).
    """
    held: dict[str, bool] = {}  # the engine's one connection: at most one transaction at a time

    def begin(_conn: Any) -> None:
        if not held:
            held["was_enabled"] = gc.isenabled()
            gc.disable()

    def end(*_args: Any) -> None:
        if held and held.pop("was_enabled"):
            gc.enable()

    event.listen(engine.sync_engine, "begin", begin)
    event.listen(engine.sync_engine, "commit", end)
    event.listen(engine.sync_engine, "rollback", end)
    # A connection invalidated mid-transaction ends it without either: the collector is
    # restored when the connection goes back to the pool at the latest.
    event.listen(engine.sync_engine, "checkin", end)


async def insert_rows(session: AsyncSession, *rows: SQLModel) -> None:
    """INSERT `rows` (of one table) as a plain cached statement, without the ORM's unit of work.

    On SQLite the write lock is held from a transaction's first write to its commit, and every
    other process's writes — the acknowledgement of an inbound event among them — wait for it:
    writes keep that stretch to the statements themselves.
    """
    table = table_of(type(rows[0]))
    await session.exec(insert(table), params=[row.model_dump() for row in rows])


def table_of(model: type[SQLModel]) -> Table:
    """The Core `Table` of a ``table=True`` model."""
    # SQLModel's metaclass sets `__table__` on table models, but SQLModel does not declare it.
    return model.__table__  # type: ignore[attr-defined]


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, class_=AsyncSession, expire_on_commit=False)


async def sqlite_checkpointer(
    engine: AsyncEngine, interval_s: float = 2.0, reset_bytes: int = WAL_RESET_BYTES
) -> None:
    """Copy the WAL back into the SQLite database every `interval_s`, in a worker thread.

    A PASSIVE checkpoint takes no lock a writer needs: it copies and fsyncs while commits go
    on. It leaves the WAL to be reset (written again from its start) by the first writer
    that finds it wholly copied, which a long checkpoint never lets happen (a commit lands
    while it fsyncs). So a WAL past `reset_bytes` is checkpointed again in quick succession:
    each of these copies only the last few commits, and one finishing between two commits
    lets the next writer reset the WAL. Only a WAL still growing past twice `reset_bytes`
    (writes without a gap) gets a RESTART, which holds the write lock while it copies the
    last frames and fsyncs the database, every commit waiting behind it: on a disk whose
    fsync stalls, a RESTART every `reset_bytes` held accepts for 100-600 ms several times a
    minute (bench/accept_wait.py). Runs until cancelled.
    """
    database = engine.url.database
    if engine.dialect.name != "sqlite" or not database or database == ":memory:":
        return

    def checkpoint() -> None:
        with closing(sqlite3.connect(database, timeout=RESET_BUSY_S)) as conn:
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            for _ in range(RESET_TRIES):
                _busy, frames, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                size = frames * page_size
                if size < reset_bytes:  # small, or reset since the last look
                    return
                if size >= 2 * reset_bytes:
                    break
                time.sleep(RESET_PAUSE_S)  # a writer's turn to find it wholly copied
            else:
                return  # the next round tries again
            log.info("SQLite WAL at %d MB with no pause in the writes to reset it: writers wait "
                     "for a RESTART checkpoint", size // 1024**2)
            conn.execute("PRAGMA wal_checkpoint(RESTART)")

    while True:
        await asyncio.sleep(interval_s)
        with suppress(sqlite3.OperationalError):  # busy: the next round will do it
            await asyncio.to_thread(checkpoint)
