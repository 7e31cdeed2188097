"""PostgreSQL's side of the inbox: group-committed accepts and NOTIFY wakeups across replicas.

Accepting is the acknowledgement's critical path. Concurrent accepts are committed together:
whatever arrives while a batch is on its way to the server goes into the next one, as a
single multi-row INSERT … ON CONFLICT DO NOTHING (a prepared statement taking one array per
column, so every batch size shares it) in autocommit: one round trip and one commit for the
whole batch. A lone event is sent at once, so a quiet service adds no batching delay (and its
INSERT takes scalars: cheaper to send and to plan than arrays of one). Unless the service is
to flush before it acknowledges (`BA_INBOX_DURABILITY=flush`), these connections commit with
synchronous_commit off: a commit returns once its WAL is in the server's buffers, not on disk
(see `Inbox`).

Once a batch that stored anything is committed (and its callers answered), `CHANNEL` is
notified in a statement of its own. Not in the batch's transaction: a transaction that
notifies holds PostgreSQL's one cluster-wide notify lock from its commit until its WAL is
flushed, so accepts that notified would wait for each other's fsync (and the workers' WAL
traffic) on the acknowledgement's path. Notifications are coalesced: at most one per
`NOTIFY_COALESCE_S`, the first of a burst at once and one after it if anything was stored
meanwhile (one per event cost serve a second round trip per acknowledgement, and every
listening worker a wakeup). Workers on every replica LISTEN on a connection of their own and
claim work at once instead of waiting for their poll; if that connection drops they go on
polling until it is back. (serve wakes its own workers through a pipe, as coalesced.)

The accept path writes only new rows of `inbound_events`; workers update existing rows and
the `thread_leases` table, so the two never wait for each other's row locks. Only two
deliveries of the same event (or message) in flight at once meet on a unique index, and the
second one is the duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from adapters.base import AcceptOutcome
from agent_core.store.tables import ThreadRow
from gateway.tables import EventStatus, InboundEventRow

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool
    from sqlalchemy.engine import URL

log = logging.getLogger(__name__)

CHANNEL = "ba_inbox"
# Other replicas hear of new work within this (serve's own workers likewise: `WAKE_COALESCE_S`).
NOTIFY_COALESCE_S = 0.025
LISTENER_NAME = "ba-agent-inbox-listener"  # its connection's application_name, with the pid


def listener_name(pid: int | None = None) -> str:
    """How a process's listening connection shows in pg_stat_activity."""
    return f"{LISTENER_NAME} {os.getpid() if pid is None else pid}"


# The per-event columns, as arrays; the rest is the same for every new event.
_ARRAYS = (("platform", "text"), ("event_id", "text"), ("dedupe_key", "text"), ("thread_key", "text"),
           ("payload", "text"), ("created_at", "timestamptz"))
_NAMES = ", ".join(name for name, _ in _ARRAYS)
# Arrays go in binary (%b): the text format escapes every quote of every payload. ORDER BY n:
# rows are inserted in arrival order, so of two deliveries of one message in the same batch the
# first is stored and the second is the duplicate.
_ARRAY_PARAMS = ", ".join(f"%({name})b::{kind}[]" for name, kind in _ARRAYS)
_INTO = f"INSERT INTO {InboundEventRow.__tablename__} ({_NAMES}, status, attempts, available_at, updated_at) "
_INSERT = f"{_INTO}SELECT {_NAMES}, '{EventStatus.PENDING.value}', 0, created_at, created_at "
# Every accept statement returns (event_id, true) for each row it stored and (event_id, false)
# for each row it did not store because its thread is not live (`if_thread_live`); a duplicate
# is not returned.
_ACCEPT_SQL = (
    f"{_INSERT} FROM unnest({_ARRAY_PARAMS}) WITH ORDINALITY AS batch({_NAMES}, n) ORDER BY n "
    "ON CONFLICT DO NOTHING RETURNING event_id, true"
)
# A batch with rows to store only in a live thread: those are asked about in the same statement.
# Twice the time of the plain insert on the server, so only for such batches.
_ACCEPT_IF_LIVE_SQL = (
    f"WITH batch AS (SELECT {_NAMES}, n, (NOT if_thread_live OR EXISTS ("
    f"SELECT 1 FROM {ThreadRow.__tablename__} AS thread "
    "WHERE thread.key = batch_rows.thread_key AND thread.archived_at IS NULL)) AS addressed "
    f"FROM unnest({_ARRAY_PARAMS}, %(if_thread_live)b::bool[]) "
    f"WITH ORDINALITY AS batch_rows({_NAMES}, if_thread_live, n)), "
    f"stored AS ({_INSERT} FROM batch WHERE addressed ORDER BY n ON CONFLICT DO NOTHING RETURNING event_id) "
    "SELECT event_id, true FROM stored UNION ALL SELECT event_id, false FROM batch WHERE NOT addressed"
)
# A lone row (what a service that is not flooded nearly always sends): the same statements with
# scalar parameters, which psycopg dumps and the server plans in half the time of arrays of one
# (0.47 against 0.32 ms a thread reply on an idle server).
_ONE_ROW = (
    f"SELECT {', '.join(f'%({name})s::{kind}' for name, kind in _ARRAYS)}, "
    f"'{EventStatus.PENDING.value}', 0, %(created_at)s, %(created_at)s "
)
_THREAD_IS_LIVE = (
    f"EXISTS (SELECT 1 FROM {ThreadRow.__tablename__} WHERE key = %(thread_key)s::text AND archived_at IS NULL)"
)
_ACCEPT_ONE_SQL = f"{_INTO}{_ONE_ROW} ON CONFLICT DO NOTHING RETURNING event_id, true"
# Both EXISTS read the statement's one snapshot: they agree.
_ACCEPT_ONE_IF_LIVE_SQL = (
    f"WITH stored AS ({_INTO}{_ONE_ROW} WHERE {_THREAD_IS_LIVE} ON CONFLICT DO NOTHING RETURNING event_id) "
    f"SELECT event_id, true FROM stored UNION ALL SELECT %(event_id)s::text, false WHERE NOT {_THREAD_IS_LIVE}"
)
# The payload is the schema, so services sharing a database in different schemas do not wake
# each other.
_NOTIFY_SQL = f"SELECT pg_notify('{CHANNEL}', current_schema())"
# As ThreadStore.is_live asks it (the partial unique index on live keys answers it).
LIVE_THREAD_SQL = f"SELECT 1 FROM {ThreadRow.__tablename__} WHERE key = %s AND archived_at IS NULL LIMIT 1"


async def _commit_without_flush(conn: AsyncConnection[Any]) -> None:
    """Set up an accept connection whose commits return before their WAL is on disk."""
    await conn.execute("SET synchronous_commit = off")


def conninfo_of(url: URL) -> str:
    """libpq connection string for an SQLAlchemy URL, its query (`options`, `sslmode`, …) kept.

    Not the URL rendered back to text: that encodes a space as "+", which libpq reads as is,
    so `options=-csearch_path=x -csynchronous_commit=off` would set neither."""
    from psycopg.conninfo import make_conninfo

    params = {k: v if isinstance(v, str) else v[-1] for k, v in url.query.items()}
    return make_conninfo(
        "", host=url.host, port=url.port, user=url.username, password=url.password, dbname=url.database, **params
    )


class PostgresInboxWriter:
    """Commits accepted events in groups: one round trip and one commit per batch.

    `BATCHES_IN_FLIGHT` batches go to the server at once, each on a connection of its own
    pool, opened at start-up and kept (no connection bursts under load), so a batch never
    waits for a connection; a second pool holds `LOOKUPS_IN_FLIGHT` connections for the
    acknowledgement's other question, whether the bot is part of a thread, and one for the
    notification that wakes other replicas. A caller is answered only once its row is
    committed, and learns whether it was a duplicate. A caller that stops waiting (the
    platform's client gave up) does not take its row out: it is committed all the same, so
    the platform's retry is a duplicate, not a second answer.

    With `flush_before_ack` each commit waits for its WAL flush (an fsync: under the busy
    ingest bench what the INSERT waits on nearly every time it is seen waiting,
    bench/accept_wait.py), and flushes run one after another: more batches in flight only
    split the same events into more, smaller commits (four measured slower than two there).
    """

    BATCHES_IN_FLIGHT = 2
    LOOKUPS_IN_FLIGHT = 2
    NOTIFIERS = 1
    MAX_BATCH = 500

    def __init__(self, conninfo: str, flush_before_ack: bool = False) -> None:
        from psycopg_pool import AsyncConnectionPool

        def pool(size: int, name: str, configure: Any = None) -> AsyncConnectionPool:
            return AsyncConnectionPool(
                conninfo, min_size=size, max_size=size, open=False, configure=configure,
                kwargs={"autocommit": True, "prepare_threshold": 0}, name=name,
            )  # fmt: skip

        self._batches = pool(self.BATCHES_IN_FLIGHT, "inbox-accept", None if flush_before_ack else _commit_without_flush)
        # A notification need not outlive a crash (a listener that missed it polls): the
        # notifying transaction does not wait for the disk either way.
        self._lookups = pool(self.LOOKUPS_IN_FLIGHT + self.NOTIFIERS, "inbox-lookup", _commit_without_flush)
        self._queue: list[tuple[dict[str, object], asyncio.Future[AcceptOutcome]]] = []
        self._queued = asyncio.Event()
        self._flushers: list[asyncio.Task[None]] = []
        self._opening = asyncio.Lock()
        self._closing = False
        self._notifier: asyncio.Task[None] | None = None
        self._notify_again = False

    async def open(self) -> None:
        """Connect the pools and start the flushers (at start-up, so no acknowledgement waits)."""
        async with self._opening:
            if not self._flushers:
                await asyncio.gather(self._batches.open(wait=True, timeout=10), self._lookups.open(wait=True, timeout=10))
                self._flushers = [
                    asyncio.create_task(self._flush_forever(), name=f"inbox-flush-{n}")
                    for n in range(self.BATCHES_IN_FLIGHT)
                ]

    async def insert(self, row: dict[str, object], if_thread_live: bool = False) -> AcceptOutcome:
        """Insert `row` (committed on return; with `if_thread_live`, only if its thread is live)."""
        if not self._flushers:
            await self.open()
        done: asyncio.Future[AcceptOutcome] = asyncio.get_running_loop().create_future()
        self._queue.append(({**row, "if_thread_live": if_thread_live}, done))
        self._queued.set()
        return await done

    async def thread_is_live(self, thread_key: str) -> bool:
        """Whether a live conversation exists for the thread: one prepared query, one round trip."""
        if not self._flushers:
            await self.open()
        async with self._lookups.connection() as conn:
            cursor = await conn.execute(LIVE_THREAD_SQL, (thread_key,), prepare=True)
            return await cursor.fetchone() is not None

    async def close(self) -> None:
        """Commit what is queued (its callers may have stopped waiting), then close the pools."""
        self._closing = True
        self._queued.set()
        await asyncio.gather(*self._flushers, return_exceptions=True)
        self._flushers = []
        if self._notifier is not None:
            await asyncio.gather(self._notifier, return_exceptions=True)
        await asyncio.gather(self._batches.close(), self._lookups.close())

    async def _flush_forever(self) -> None:
        while True:
            while not self._queue:
                if self._closing:
                    return
                self._queued.clear()
                await self._queued.wait()
            batch, self._queue = self._queue[: self.MAX_BATCH], self._queue[self.MAX_BATCH :]
            try:
                stored, not_addressed = await self._insert([row for row, _ in batch])
                stored_any = bool(stored)
            except Exception as exc:  # every caller of the batch gets it
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for row, done in batch:
                event_id = str(row["event_id"])
                if event_id in not_addressed:
                    outcome = AcceptOutcome.NOT_IN_LIVE_THREAD
                elif event_id in stored:
                    outcome = AcceptOutcome.ACCEPTED
                    stored.discard(event_id)  # two deliveries of one event in a batch: the first is stored
                else:
                    outcome = AcceptOutcome.DUPLICATE
                if not done.done():
                    done.set_result(outcome)
            if stored_any:
                self._wake_other_replicas()

    def _wake_other_replicas(self) -> None:
        """Notify `CHANNEL` after the commit, off the acknowledgement's path (coalesced)."""
        if self._notifier is None or self._notifier.done():
            self._notifier = asyncio.create_task(self._notify(), name="inbox-notify")
        else:
            self._notify_again = True

    async def _notify(self) -> None:
        import psycopg

        while True:
            self._notify_again = False
            try:
                async with self._lookups.connection() as conn:
                    await conn.execute(_NOTIFY_SQL, prepare=True)
            except psycopg.Error as exc:  # the other replicas' poll finds the work
                log.warning("inbox notification failed (%s); other replicas will poll", type(exc).__name__)
            await asyncio.sleep(NOTIFY_COALESCE_S)  # what is stored meanwhile: one notification after it
            if not self._notify_again:
                return

    async def _insert(self, rows: list[dict[str, object]]) -> tuple[set[str], set[str]]:
        """The batch in one statement; returns the event ids it stored, and those of the rows
        it did not store because their thread is not live."""
        if len(rows) == 1:
            sql, params = (_ACCEPT_ONE_IF_LIVE_SQL if rows[0]["if_thread_live"] else _ACCEPT_ONE_SQL), rows[0]
        else:
            params = {name: [row[name] for row in rows] for name, _ in _ARRAYS}
            if_thread_live = [row["if_thread_live"] for row in rows]
            sql = _ACCEPT_SQL
            if any(if_thread_live):
                sql, params = _ACCEPT_IF_LIVE_SQL, {**params, "if_thread_live": if_thread_live}
        async with self._batches.connection() as conn:
            cursor = await conn.execute(sql, params, prepare=True)
            results = await cursor.fetchall()
        return {event_id for event_id, stored in results if stored}, {event_id for event_id, stored in results if not stored}


async def listen_for_work(conninfo: str, wakeup: asyncio.Event, retry_s: float = 5.0) -> None:
    """Set `wakeup` whenever any process commits new events to this inbox, until cancelled.

    Also sets it each time listening (re)starts, for what was committed while it was not. A
    lost connection is reported and reopened after `retry_s`; meanwhile the dispatcher's poll
    finds the work.
    """
    import psycopg

    while True:
        try:
            conn = await psycopg.AsyncConnection.connect(
                conninfo, autocommit=True, application_name=listener_name()
            )
            async with conn:
                await _listen(conn, wakeup)
        except psycopg.Error as exc:
            log.warning("inbox listener lost its connection (%s); polling until it is back", type(exc).__name__)
        await asyncio.sleep(retry_s)


async def _listen(conn: AsyncConnection[Any], wakeup: asyncio.Event) -> None:
    cursor = await conn.execute("SELECT current_schema()")
    schema = (await cursor.fetchone() or ("",))[0]
    await conn.execute(f"LISTEN {CHANNEL}")
    wakeup.set()
    while True:
        # A quiet minute ends in a round trip: a connection that died without a word (a
        # network partition) fails it, instead of leaving us waiting for nothing forever.
        async for note in conn.notifies(timeout=60):
            if note.payload == schema:
                wakeup.set()
        await conn.execute("SELECT 1")
