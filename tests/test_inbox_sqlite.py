"""The SQLite inbox writer: how acceptance behaves while another process holds the write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from adapters.base import AcceptOutcome
from agent_core.store.db import create_engine, sqlite_checkpointer
from gateway.migrate import upgrade
from gateway.service.inbox import Inbox, SQLiteInboxWriter
from tests.test_storage import inbound


def hold_write_lock(database: Path, seconds: float, held: threading.Event) -> threading.Thread:
    """Another connection (as another process would) takes the write lock for `seconds`."""

    def run() -> None:
        conn = sqlite3.connect(database, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.fixture
async def sqlite_inbox(tmp_path: Path):
    database = tmp_path / "inbox.db"
    upgrade(f"sqlite:///{database}")
    engine = create_engine(f"sqlite:///{database}")
    inbox = Inbox(engine)
    yield inbox, database
    await inbox.close()
    await engine.dispose()


async def test_accept_waits_out_a_held_lock_without_stalling_the_event_loop(sqlite_inbox) -> None:
    inbox, database = sqlite_inbox
    held = threading.Event()
    holder = hold_write_lock(database, 0.3, held)
    await asyncio.to_thread(held.wait)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    started = time.monotonic()
    outcome = await inbox.accept(inbound("Ev1", "1.1"))
    waited = time.monotonic() - started
    ticking.cancel()
    holder.join()
    assert outcome is AcceptOutcome.ACCEPTED
    assert waited >= 0.2  # it really waited for the lock ...
    assert ticks >= 10  # ... while other requests could still be served
    assert await inbox.accept(inbound("Ev1", "1.1")) is AcceptOutcome.DUPLICATE


async def test_accepts_that_waited_out_a_held_lock_are_each_stored_once(sqlite_inbox) -> None:
    inbox, database = sqlite_inbox
    held = threading.Event()
    holder = hold_write_lock(database, 0.2, held)
    await asyncio.to_thread(held.wait)
    deliveries = [inbound("Ev1", "1.1"), inbound("Ev2", "2.1"), inbound("Ev1", "1.1"), inbound("Ev3", "2.1")]
    outcomes = await asyncio.gather(*(inbox.accept(msg) for msg in deliveries))
    holder.join()
    # The first delivery of an event or message is the stored one; Ev3 repeats Ev2's message.
    assert outcomes == [AcceptOutcome.ACCEPTED, AcceptOutcome.ACCEPTED, AcceptOutcome.DUPLICATE, AcceptOutcome.DUPLICATE]
    assert await inbox.open_events() == 2
    assert await inbox.accept(inbound("Ev4", "4.1")) is AcceptOutcome.ACCEPTED  # no lock left behind


async def test_accept_gives_up_when_the_lock_is_held_past_the_deadline(sqlite_inbox, monkeypatch) -> None:
    inbox, database = sqlite_inbox
    monkeypatch.setattr(SQLiteInboxWriter, "BUSY_DEADLINE_S", 0.2)
    held = threading.Event()
    holder = hold_write_lock(database, 1.0, held)
    await asyncio.to_thread(held.wait)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        await inbox.accept(inbound("Ev2", "2.1"))
    holder.join()
    assert await inbox.open_events() == 0  # nothing half-written
    assert await inbox.accept(inbound("Ev2", "2.1")) is AcceptOutcome.ACCEPTED


async def test_the_wal_stays_bounded_while_accepts_never_pause(sqlite_inbox) -> None:
    # Under steady writes a commit always lands while a PASSIVE checkpoint fsyncs, so no
    # writer ever finds the WAL wholly copied and resets it: the checkpointer must.
    inbox, database = sqlite_inbox
    reset_bytes = 256 * 1024
    engine = create_engine(f"sqlite:///{database}")
    checkpointer = asyncio.create_task(sqlite_checkpointer(engine, interval_s=0.005, reset_bytes=reset_bytes))
    wal = database.with_name(database.name + "-wal")
    generations: set[int] = set()
    for n in range(3000):
        msg = inbound(f"Ev{n}", f"{n}.1", root=f"{n % 40}.1").model_copy(update={"text": "how are sales? " * 100})
        assert await inbox.accept(msg) is AcceptOutcome.ACCEPTED
        generations.add(wal_generation(wal))
        if n % 10 == 0:
            await asyncio.sleep(0)  # the checkpointer's turn to look, not a pause in the writes
    checkpointer.cancel()
    await engine.dispose()
    assert await inbox.open_events() == 3000
    # These accepts write about 80 MB to the WAL: left to writers, it would hold all of it,
    # written once from its start. Each reset starts the WAL over (a new generation); how far
    # one stretches depends on the disk (it grows while a checkpoint fsyncs): 10-17 resets
    # here, from a quiet machine to one with two CPU hogs, and one without the checkpointer.
    assert len(generations) >= 4


def wal_generation(wal: Path) -> int:
    """The WAL header's checkpoint sequence number: one more each time the WAL is reset."""
    with wal.open("rb") as file:
        return int.from_bytes(file.read(16)[12:16], "big")
