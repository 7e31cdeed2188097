"""The durable inbox: accepted messages are committed before the platform is acknowledged.

Work is claimed per thread through a lease row that only one process can hold at a time
(an atomic upsert that succeeds only when the lease is free or expired). Holding the lease, a
worker answers the thread's events oldest first, so replies in one thread keep their order,
and a crashed process's threads are picked up by anyone once its lease expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import col

from adapters.base import AcceptOutcome
from agent_core.messages import InboundMessage, ThreadKey, utcnow
from agent_core.store.db import sqlite_pragmas
from agent_core.store.types import UTCDateTime
from gateway.service.inbox_postgres import LIVE_THREAD_SQL, PostgresInboxWriter, conninfo_of, listen_for_work
from gateway.tables import OPEN_SQL, EventStatus, InboundEventRow, ThreadLeaseRow

_OPEN = (EventStatus.PENDING.value, EventStatus.PROCESSING.value)


# A look for work reads this many open events at a time, oldest first.
CLAIM_WINDOW = 64
# The oldest open events after a given id: a range scan of the partial index of open events
# (`OPEN_SQL` spelled out, so both planners match it to the index without statistics).
_OPEN_EVENTS_AFTER = (
    select(
        col(InboundEventRow.id),
        col(InboundEventRow.thread_key),
        (col(InboundEventRow.available_at) <= bindparam("now")).label("due"),
    )
    .where(text(OPEN_SQL), col(InboundEventRow.id) > bindparam("after"))
    .order_by(col(InboundEventRow.id))
    .limit(bindparam("window"))
)
_LEASED_AMONG = select(col(ThreadLeaseRow.thread_key)).where(
    col(ThreadLeaseRow.thread_key).in_(bindparam("threads", expanding=True)),
    col(ThreadLeaseRow.expires_at) >= bindparam("now"),
)
_OPEN_EVENTS = select(func.count()).select_from(InboundEventRow).where(text(OPEN_SQL))
# Without statistics (a table that has just grown, or autovacuum off) PostgreSQL guesses a
# handful of open events and fetches every one by bitmap to sort them, rather than walk the
# index in order and stop at the window: a read that grows with the backlog (13 ms at 10,000).
_WALK_THE_INDEX = text("SET LOCAL enable_bitmapscan = off")
# A row for the SQLite writer, and whether to store it only in a live thread.
_Insert = tuple[dict[str, Any], bool]
_ASYNC_COMMIT = text("SET LOCAL synchronous_commit TO OFF")


class SQLiteInboxWriter:
    """Inserts accepted events into a SQLite file on a connection of its own, on the event loop.

    This is the acknowledgement's critical path: SQLAlchemy's async bridge costs several times
    the insert itself, so the one statement runs on the driver directly, at once when the
    write lock is free. Another process (a worker, a checkpoint) holds that lock for a
    fraction of a millisecond per transaction, now and then for an fsync: then the events
    that arrive queue up, and one task polls for the lock for all of them, first in 50 µs
    steps for `SPIN_S` (SQLite's own busy handler sleeps a whole millisecond, as would an
    async sleep), then every `POLL_S` with async sleeps, so a lock held long never stalls
    the event loop and its release is noticed within a millisecond (a growing backoff would
    oversleep it by as much as it had waited). The queue is inserted in one transaction, in
    arrival order: one commit, instead of one lock hand-over per event.
    """

    _COLUMNS = ("platform", "event_id", "dedupe_key", "thread_key", "payload", "status", "attempts",
                "available_at", "created_at", "updated_at")
    # ON CONFLICT DO NOTHING without a target covers both unique keys (event and message).
    # Whether a row went in is the statement's change count: RETURNING costs SQLite a
    # tenth of the insert.
    _SQL = (
        f"INSERT INTO {InboundEventRow.__tablename__} ({', '.join(_COLUMNS)}) "
        f"VALUES ({', '.join(':' + c for c in _COLUMNS)}) ON CONFLICT DO NOTHING"
    )
    _LIVE_THREAD_SQL = LIVE_THREAD_SQL.replace("%s", "?")
    BUSY_DEADLINE_S = 2.0  # within the platforms' 3 s acknowledgement window
    SPIN_S = 0.002
    POLL_S = 0.001

    def __init__(self, database: str, flush_before_ack: bool = False) -> None:
        self._conn = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        sqlite_pragmas(self._conn, None)
        self._conn.execute("PRAGMA busy_timeout=0")
        if flush_before_ack:  # each commit syncs the WAL file (the service's others do not)
            self._conn.execute("PRAGMA synchronous=FULL")
        # The same text form SQLAlchemy gives these columns, so every reader parses them alike.
        processor = UTCDateTime().bind_processor(sqlite.dialect())
        assert processor is not None  # a TypeDecorator with process_bind_param always has one
        self._time = processor
        self._waiting: list[tuple[_Insert, asyncio.Future[AcceptOutcome]]] = []
        self._poller: asyncio.Task[None] | None = None

    async def insert(self, row: dict[str, object], if_thread_live: bool = False) -> AcceptOutcome:
        """Insert `row` and commit (with `if_thread_live`, only if its thread is a live one)."""
        params: dict[str, Any] = {c: row[c] for c in self._COLUMNS}
        times = ("available_at", "created_at", "updated_at")
        as_text = {moment: self._time(moment) for moment in {params[column] for column in times}}  # one instant, mostly
        for column in times:
            params[column] = as_text[params[column]]
        insert = (params, if_thread_live)
        if not self._waiting and self._begin():  # nobody queued ahead of it, and the lock is free
            return self._insert_and_commit([insert])[0]
        done: asyncio.Future[AcceptOutcome] = asyncio.get_running_loop().create_future()
        self._waiting.append((insert, done))
        if self._poller is None:
            # A task of its own: a caller that stops waiting does not strand the queue.
            self._poller = asyncio.create_task(self._commit_waiting(), name="inbox-sqlite-wait")
        return await done

    def _begin(self) -> bool:
        """Take the write lock; False when another connection holds it."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:  # BUSY and its extended codes
                raise
            return False
        return True

    def _insert_and_commit(self, inserts: list[_Insert]) -> list[AcceptOutcome]:
        """In the transaction `_begin` opened (so a thread cannot be archived meanwhile): what
        became of each row."""
        try:
            outcomes = [self._insert_one(params, if_thread_live) for params, if_thread_live in inserts]
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        return outcomes

    def _insert_one(self, params: dict[str, Any], if_thread_live: bool) -> AcceptOutcome:
        if if_thread_live and not self.thread_is_live(params["thread_key"]):
            return AcceptOutcome.NOT_IN_LIVE_THREAD
        if self._conn.execute(self._SQL, params).rowcount == 0:
            return AcceptOutcome.DUPLICATE
        return AcceptOutcome.ACCEPTED

    async def _commit_waiting(self) -> None:
        """Wait for the lock, then commit every queued row (those queued meanwhile included)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            while not self._begin():
                waited = loop.time() - started
                if waited > self.BUSY_DEADLINE_S:
                    raise sqlite3.OperationalError("database is locked")
                if waited < self.SPIN_S:
                    time.sleep(0.00005)
                else:
                    await asyncio.sleep(self.POLL_S)
        except Exception as exc:  # past the deadline: every queued caller gets it
            self._fail(self._waiting, exc)
            return
        except asyncio.CancelledError:  # closing
            self._fail(self._waiting, sqlite3.OperationalError("inbox closed"))
            raise
        finally:
            batch, self._waiting, self._poller = self._waiting, [], None
        try:
            results = self._insert_and_commit([insert for insert, _ in batch])
        except Exception as exc:
            self._fail(batch, exc)
            return
        for (_, done), outcome in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(outcome)

    @staticmethod
    def _fail(batch: list[tuple[_Insert, asyncio.Future[AcceptOutcome]]], exc: Exception) -> None:
        for _, done in batch:
            if not done.done():
                done.set_exception(exc)

    def thread_is_live(self, thread_key: str) -> bool:
        """Whether a live conversation exists for the thread (a read: never waits for the lock)."""
        return self._conn.execute(self._LIVE_THREAD_SQL, (thread_key,)).fetchone() is not None

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
        self._conn.close()


class Inbox:
    """Accepts inbound messages and hands out per-thread work under leases.

    An accept returns once its row is committed: visible to every process, and surviving a
    crash of this one. With `flush_before_ack` it also waits for the database to flush its log
    to the disk, so the row survives a power loss (or a crash of the PostgreSQL server) too.
    Without it, the last fraction of a second of accepts can be lost to one: the database's
    log writer flushes them within 0.6 s (PostgreSQL's default wal_writer_delay, three times
    over), and the first durable commit after them (a worker's outbound ledger row) carries
    them to the disk with it. The flush is what an acknowledgement waited on nearly every time
    it was slow: on a virtual disk whose fsync stalls for 10-300 ms a few times a second even
    when idle, it made PostgreSQL's p99 18x the bare floor's instead of 1.7x (bench/ingest.py).
    """

    def __init__(self, engine: AsyncEngine, *, flush_before_ack: bool = False) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        self._accept_statement = (
            self._insert(InboundEventRow).on_conflict_do_nothing().returning(col(InboundEventRow.id))
        )
        database = engine.url.database
        self._sqlite_writer = (
            SQLiteInboxWriter(database, flush_before_ack)
            if engine.dialect.name == "sqlite" and database and database != ":memory:"
            else None
        )
        self._postgres_url = conninfo_of(engine.url) if engine.dialect.name == "postgresql" else None
        self._postgres_writer = PostgresInboxWriter(self._postgres_url, flush_before_ack) if self._postgres_url else None
        self.wakeup = asyncio.Event()

    async def open(self) -> None:
        """Prepare the accept path before the first event arrives."""
        if self._postgres_writer is not None:
            await self._postgres_writer.open()

    async def listen_for_work(self, retry_s: float = 5.0) -> None:
        """Set `wakeup` whenever another process (another replica) accepts an event, until
        cancelled. PostgreSQL only; SQLite workers are woken by their serve or poll."""
        if self._postgres_url is not None:
            await listen_for_work(self._postgres_url, self.wakeup, retry_s)

    async def close(self) -> None:
        if self._sqlite_writer is not None:
            self._sqlite_writer.close()
        if self._postgres_writer is not None:
            await self._postgres_writer.close()

    async def accept(self, msg: InboundMessage, *, if_thread_live: bool = False) -> AcceptOutcome:
        """Store `msg` unless its event or message was seen before — with `if_thread_live`, only
        if its thread is a live conversation, asked in the same transaction (see
        `adapters.base.AcceptMessage`). Commits before returning."""
        now = utcnow()
        row = {
            "platform": msg.platform,
            "event_id": f"{msg.platform}:{msg.event_id}",
            "dedupe_key": msg.dedupe_key,
            "thread_key": str(msg.thread),
            "payload": msg.model_dump_json(),
            "status": EventStatus.PENDING.value,
            "attempts": 0,
            "available_at": now,
            "created_at": now,
            "updated_at": now,
        }
        if self._sqlite_writer is not None:
            outcome = await self._sqlite_writer.insert(row, if_thread_live)
        elif self._postgres_writer is not None:
            outcome = await self._postgres_writer.insert(row, if_thread_live)
        else:
            async with self._engine.begin() as conn:
                if if_thread_live and not await self._is_live_on(conn, str(msg.thread)):
                    return AcceptOutcome.NOT_IN_LIVE_THREAD
                inserted = (await conn.execute(self._accept_statement, row)).first() is not None
            outcome = AcceptOutcome.ACCEPTED if inserted else AcceptOutcome.DUPLICATE
        if outcome is AcceptOutcome.ACCEPTED:
            self.wakeup.set()
        return outcome

    async def thread_is_live(self, key: ThreadKey) -> bool:
        """Whether a live conversation exists for `key` (the bot is part of that thread).

        `ThreadStore.is_live`'s question, asked on the accept path's own connection: a
        follow-up in a thread is acknowledged only after it, and through the ORM session it
        cost several times the inbox commit."""
        if self._sqlite_writer is not None:
            return self._sqlite_writer.thread_is_live(str(key))
        if self._postgres_writer is not None:
            return await self._postgres_writer.thread_is_live(str(key))
        async with self._engine.connect() as conn:
            return await self._is_live_on(conn, str(key))

    @staticmethod
    async def _is_live_on(conn: AsyncConnection, thread_key: str) -> bool:
        return (await conn.execute(text(LIVE_THREAD_SQL.replace("%s", ":key")), {"key": thread_key})).first() is not None

    async def threads_with_work(self, limit: int = 32) -> list[str]:
        """Threads whose oldest unanswered event is due and that nobody holds, longest-waiting first.

        The open events are read oldest first, `CLAIM_WINDOW` at a time, until `limit` threads
        are found: a thread's first event in that order is its head (all its older open events
        came before it). Each read is a range of the open events' own index, so a look costs
        the same at a backlog of 300 or 30,000 and needs no planner statistics; the one
        aggregate over all open events it replaces took 25 ms at 8,000 on PostgreSQL, several
        times a second while workers answered, on the database that takes the accepts.
        Only a backlog held almost wholly by leased threads makes it read further.
        """
        now = utcnow()
        seen: set[str] = set()
        offered: list[str] = []
        after: int | None = 0  # the id of the last event read (ids are never None once stored)
        async with self._engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(_WALK_THE_INDEX)  # until this transaction ends
            while len(offered) < limit:
                window = {"after": after, "window": CLAIM_WINDOW, "now": now}
                events = (await conn.execute(_OPEN_EVENTS_AFTER, window)).all()
                heads = []
                for _id, thread_key, due in events:
                    if thread_key not in seen:
                        seen.add(thread_key)
                        if due:  # else the head waits for its retry, and the thread with it
                            heads.append(thread_key)
                if heads:
                    leased = set((await conn.execute(_LEASED_AMONG, {"threads": heads, "now": now})).scalars())
                    offered += [thread for thread in heads if thread not in leased]
                if len(events) < CLAIM_WINDOW:
                    break
                after = events[-1][0]
        return offered[:limit]

    async def open_events(self) -> int:
        """How many accepted events are not answered yet."""
        async with self._engine.connect() as conn:
            return (await conn.execute(_OPEN_EVENTS)).scalar_one()

    async def acquire_lease(self, thread_key: str, owner: str, seconds: float) -> bool:
        """Take (or extend) the lease on a thread; False when someone else holds it."""
        now = utcnow()
        lease = self._insert(ThreadLeaseRow).values(
            thread_key=thread_key, owner=owner, expires_at=now + timedelta(seconds=seconds)
        )
        stmt = lease.on_conflict_do_update(
            index_elements=["thread_key"],
            set_={"owner": lease.excluded.owner, "expires_at": lease.excluded.expires_at},
            where=(col(ThreadLeaseRow.expires_at) < now) | (col(ThreadLeaseRow.owner) == owner),
        ).returning(col(ThreadLeaseRow.owner))
        async with self._bookkeeping() as conn:
            return (await conn.execute(stmt)).first() is not None

    async def release_lease(self, thread_key: str, owner: str) -> None:
        async with self._bookkeeping() as conn:
            await conn.execute(
                delete(ThreadLeaseRow).where(
                    col(ThreadLeaseRow.thread_key) == thread_key, col(ThreadLeaseRow.owner) == owner
                )
            )

    async def next_event(self, thread_key: str) -> InboundEventRow | None:
        """The oldest unanswered event of a thread, if it is due (call holding the lease).

        A newer event never overtakes an older one that is waiting to be retried."""
        stmt = (
            select(InboundEventRow)
            .where(col(InboundEventRow.thread_key) == thread_key, col(InboundEventRow.status).in_(_OPEN))
            .order_by(col(InboundEventRow.id))
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).mappings().first()
        if row is None or row["available_at"] > utcnow():
            return None
        return InboundEventRow.model_validate(dict(row))

    async def stop_after(self, thread_key: str, event_row_id: int) -> InboundMessage | None:
        """A Stop accepted in the thread after event `event_row_id` and not yet handled: the
        turn of that event is to end as stopped (a thread has a handful of open events)."""
        stmt = (
            select(col(InboundEventRow.payload))
            .where(
                col(InboundEventRow.thread_key) == thread_key,
                col(InboundEventRow.status).in_(_OPEN),
                col(InboundEventRow.id) > event_row_id,
            )
            .order_by(col(InboundEventRow.id))
        )
        async with self._engine.connect() as conn:
            payloads = (await conn.execute(stmt)).scalars().all()
        for payload in payloads:
            msg = InboundMessage.model_validate_json(payload)
            if msg.stop:
                return msg
        return None

    async def start(self, event_row_id: int) -> None:
        """Mark an event as being answered and count the attempt."""
        await self._set(
            event_row_id,
            status=EventStatus.PROCESSING.value,
            attempts=InboundEventRow.attempts + 1,
        )

    async def finish(self, event_row_id: int, status: EventStatus, error: str | None = None) -> None:
        await self._set(event_row_id, status=status.value, error=error)

    async def retry_later(self, event_row_id: int, delay_s: float, error: str) -> None:
        """Put a failed event back, not to be picked up again for `delay_s` seconds."""
        await self._set(
            event_row_id,
            status=EventStatus.PENDING.value,
            error=error,
            available_at=utcnow() + timedelta(seconds=delay_s),
        )

    @contextlib.asynccontextmanager
    async def _bookkeeping(self) -> AsyncIterator[AsyncConnection]:
        """A transaction of the workers' bookkeeping (leases, event status), whose commit on
        PostgreSQL does not wait for the disk.

        Each commit that waits flushes the WAL, and the acknowledgements' commits queue behind
        those flushes. Losing the last fraction of a second of these to a database crash is
        harmless: a lease expires anyway, and an event whose "done" is lost is answered again
        without a second post (the outbound ledger, committed durably, knows it was sent)."""
        async with self._engine.begin() as conn:
            if self._postgres_writer is not None:
                await conn.execute(_ASYNC_COMMIT)
            yield conn

    async def _set(self, event_row_id: int, **values: object) -> None:
        async with self._bookkeeping() as conn:
            await conn.execute(
                update(InboundEventRow)
                .where(col(InboundEventRow.id) == event_row_id)
                .values(updated_at=utcnow(), **values)
            )
