"""The SQLite inbox writer: how acceptance behaves while another process holds the write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from adapters.base import AcceptOutcome
from agent_core.store.db import create_engine
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
