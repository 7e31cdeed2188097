"""The durable inbox, thread leases, the outbound ledger and the thread store, on both databases."""

from __future__ import annotations

import asyncio
import json

from adapters.base import AcceptOutcome
from agent_core.messages import (
    InboundMessage,
    OutboundReply,
    Role,
    StandardMessage,
    TextBlock,
    ThinkingBlock,
    ThreadKey,
    ToolUseBlock,
)
from agent_core.store.db import session_factory
from agent_core.store.threads import ThreadStore
from gateway.migrate import upgrade
from gateway.service.inbox import CLAIM_WINDOW, Inbox
from gateway.service.outbound import OutboundLedger
from gateway.tables import EventStatus
from tests.waiting import eventually

KEY = ThreadKey(platform="slack", workspace="T1", channel="C1", root="100.1")


def inbound(event_id: str, ts: str, root: str = "100.1") -> InboundMessage:
    return InboundMessage(
        platform="slack",
        event_id=event_id,
        message_id=ts,
        workspace="T1",
        channel="C1",
        thread=ThreadKey(platform="slack", workspace="T1", channel="C1", root=root),
        reply_in_thread=root,
        user="U1",
        text="hello",
    )


async def test_accept_dedupes_event_and_message(inbox) -> None:
    assert await inbox.accept(inbound("Ev1", "100.1")) is AcceptOutcome.ACCEPTED
    assert await inbox.accept(inbound("Ev1", "100.1")) is AcceptOutcome.DUPLICATE
    # The same message as a second event type (app_mention + message) is one message.
    assert await inbox.accept(inbound("Ev2", "100.1")) is AcceptOutcome.DUPLICATE
    results = await asyncio.gather(*(inbox.accept(inbound("Ev3", "100.2")) for _ in range(4)))
    assert sorted(results) == sorted([AcceptOutcome.ACCEPTED] + [AcceptOutcome.DUPLICATE] * 3)
    assert await inbox.threads_with_work() == [str(KEY)]



async def test_work_is_offered_longest_waiting_first_past_a_backlog_of_held_threads(inbox) -> None:
    """Threads that someone holds may fill many of the oldest open events: the look for work
    reads on past them, and never offers a thread whose oldest event waits for its retry."""
    busy = [inbound(f"Busy{n}", f"200.{n}", root="busy") for n in range(CLAIM_WINDOW * 2 + 5)]
    for msg in busy:
        await inbox.accept(msg)
    await inbox.accept(inbound("Retry", "300.1", root="retrying"))
    await inbox.accept(inbound("Retry2", "300.2", root="retrying"))
    await inbox.accept(inbound("Late1", "400.1", root="late1"))
    await inbox.accept(inbound("Late2", "400.2", root="late2"))
    retrying = await inbox.next_event("slack:T1:C1:retrying")
    assert retrying is not None
    await inbox.retry_later(retrying.id, 30, "boom")
    assert await inbox.threads_with_work() == ["slack:T1:C1:busy", "slack:T1:C1:late1", "slack:T1:C1:late2"]
    assert await inbox.acquire_lease("slack:T1:C1:busy", "worker", seconds=30)
    assert await inbox.threads_with_work() == ["slack:T1:C1:late1", "slack:T1:C1:late2"]
    assert await inbox.threads_with_work(limit=1) == ["slack:T1:C1:late1"]
    assert await inbox.open_events() == len(busy) + 4

async def test_lease_is_exclusive_until_it_expires(inbox) -> None:
    assert await inbox.acquire_lease("k", "a", seconds=30)
    assert not await inbox.acquire_lease("k", "b", seconds=30)
    assert await inbox.acquire_lease("k", "a", seconds=30)  # the holder renews
    await inbox.release_lease("k", "a")
    assert await inbox.acquire_lease("k", "b", seconds=0.05)
    await asyncio.sleep(0.1)
    assert await inbox.acquire_lease("k", "a", seconds=30)  # expired: taken over


async def test_concurrent_lease_attempts_have_one_winner(inbox) -> None:
    wins = await asyncio.gather(*(inbox.acquire_lease("k", f"w{i}", 30) for i in range(8)))
    assert wins.count(True) == 1


async def test_events_of_a_thread_come_oldest_first_and_retries_do_not_overtake(inbox) -> None:
    await inbox.accept(inbound("Ev1", "100.1"))
    await inbox.accept(inbound("Ev2", "100.2"))
    first = await inbox.next_event(str(KEY))
    assert first is not None and first.event_id == "slack:Ev1"
    await inbox.retry_later(first.id, 30, "boom")
    assert await inbox.next_event(str(KEY)) is None  # Ev2 waits behind Ev1
    assert await inbox.threads_with_work() == []
    await inbox.finish(first.id, EventStatus.DONE)
    second = await inbox.next_event(str(KEY))
    assert second is not None and second.event_id == "slack:Ev2"


async def test_ledger_records_once_and_knows_what_was_sent(engine) -> None:
    ledger = OutboundLedger(engine)
    pending = await ledger.begin("ev1", 1, "slack", OutboundReply(text="first"))
    assert pending is not None and not pending.resumed
    again = await ledger.begin("ev1", 1, "slack", OutboundReply(text="second"))
    assert again is not None and again.resumed and again.reply.text == "first"
    await ledger.mark_sent("ev1")
    assert await ledger.begin("ev1", 1, "slack", OutboundReply(text="third")) is None


async def test_thread_store_round_trip_and_restart(engine) -> None:
    store = ThreadStore(session_factory(engine))
    thread_id = await store.open(KEY)
    assert await store.open(KEY) == thread_id
    messages = [
        StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text="q")]),
        StandardMessage(
            thread_id=thread_id,
            role=Role.ASSISTANT,
            content=[
                ThinkingBlock(thinking="hmm", signature="sig/+=="),
                ToolUseBlock(id="toolu_1", name="sql_query", input={"sql": "SELECT 1"}),
            ],
        ),
    ]
    await store.append(thread_id, messages[:1], event_key="e1")
    await store.append(thread_id, messages[1:])
    fresh = ThreadStore(session_factory(engine))  # a restarted process
    history = await fresh.history(thread_id)
    assert [m.to_api() for m in history] == [m.to_api() for m in messages]
    assert await fresh.has_event(thread_id, "e1")
    # Another process appended meanwhile: at its next turn the first store sees it incrementally.
    await fresh.append(thread_id, [StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text="r")])])
    store.revalidate(thread_id)
    assert [m.text for m in await store.history(thread_id)][-1] == "r"


async def test_reset_starts_a_new_conversation(engine) -> None:
    store = ThreadStore(session_factory(engine))
    first = await store.open(KEY)
    assert await store.is_live(KEY)
    await store.reset(KEY)
    assert not await store.is_live(KEY)
    assert await store.open(KEY) != first


def test_migrations_are_idempotent(database_url: str) -> None:
    assert upgrade(database_url) == upgrade(database_url)


async def test_older_schema_rows_are_upgraded_on_read(engine) -> None:
    from agent_core.messages import SCHEMA_VERSION, utcnow
    from agent_core.store.tables import MessageRow

    store = ThreadStore(session_factory(engine))
    thread_id = await store.open(KEY)
    v1_content = [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
                   "content": [{"type": "text", "text": "| region | gmv |"}, {"type": "text", "text": "| East | 1 |"}]}]
    async with session_factory(engine)() as session:
        session.add(MessageRow(id="old1", thread_id=thread_id, seq=1, role="user", content=json.dumps(v1_content),
                               schema_version=1, created_at=utcnow()))
        await session.commit()
    [message] = await store.history(thread_id)
    assert message.schema_version == SCHEMA_VERSION
    assert message.tool_results()[0].content == "| region | gmv |\n| East | 1 |"


async def test_rows_from_a_newer_schema_are_refused(engine) -> None:
    from agent_core.messages import utcnow
    from agent_core.store.schema import UnknownSchemaVersion
    from agent_core.store.tables import MessageRow

    store = ThreadStore(session_factory(engine))
    thread_id = await store.open(KEY)
    async with session_factory(engine)() as session:
        session.add(MessageRow(id="new1", thread_id=thread_id, seq=1, role="user", content="[]",
                               schema_version=99, created_at=utcnow()))
        await session.commit()
    try:
        await store.history(thread_id)
    except UnknownSchemaVersion as exc:
        assert "99" in str(exc)
    else:
        raise AssertionError("a newer schema must not be read silently")


async def test_no_garbage_collection_runs_while_a_process_holds_the_sqlite_write_lock(tmp_path) -> None:
    # Every other process's writes (serve's acknowledgements) wait for the lock a transaction
    # holds: a collection inside one would make them wait for its whole length.
    import contextlib
    import gc

    from sqlalchemy import text

    from agent_core.store.db import create_engine

    url = f"sqlite:///{tmp_path / 'gc.db'}"
    upgrade(url)
    engine = create_engine(url)
    in_transaction = False
    started: list[bool] = []

    def record(phase: str, _info: dict) -> None:
        if phase == "start":
            started.append(in_transaction)

    def cyclic_garbage() -> None:
        for _ in range(20_000):  # well past the collector's thresholds
            cycle: list = []
            cycle.append(cycle)

    was_enabled = gc.isenabled()  # the CLI's in-process tests leave it off (`gateway.cli.main`)
    gc.enable()
    gc.callbacks.append(record)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
            in_transaction = True
            cyclic_garbage()
            in_transaction = False
        cyclic_garbage()
        assert started and not any(started)  # collections ran, none inside the transaction
        with contextlib.suppress(RuntimeError):
            async with engine.begin() as conn:
                await conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
                raise RuntimeError("a failed turn")
        assert gc.isenabled()  # rolled back: the collector is back on
        gc.disable()  # a command that turned the collector off keeps it off
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE alembic_version SET version_num = version_num"))
        assert not gc.isenabled()
    finally:
        gc.callbacks.remove(record)
        if was_enabled:
            gc.enable()
        await engine.dispose()


async def test_sqlite_wal_is_checkpointed_in_the_background(tmp_path) -> None:
    import sqlite3
    from contextlib import closing

    from agent_core.store.db import create_engine, sqlite_checkpointer

    url = f"sqlite:///{tmp_path / 'wal.db'}"
    upgrade(url)
    engine = create_engine(url)
    inbox = Inbox(engine)
    for i in range(50):
        await inbox.accept(inbound(f"Ev{i}", f"{i}.1", root=f"{i}.1"))
    wal = tmp_path / "wal.db-wal"
    assert wal.stat().st_size > 0  # commits went to the WAL; no automatic checkpoint ran

    def rows_in_main_file() -> int:
        # The database file alone, without its WAL: only checkpointed commits are in it.
        copy = tmp_path / "copy.db"
        copy.write_bytes((tmp_path / "wal.db").read_bytes())
        with closing(sqlite3.connect(copy)) as conn:
            return conn.execute("SELECT count(*) FROM inbound_events").fetchone()[0]

    assert rows_in_main_file() == 0
    task = asyncio.create_task(sqlite_checkpointer(engine, interval_s=0.02))
    await eventually(lambda: rows_in_main_file() == 50, 10, "a checkpoint", poll=0.05)
    task.cancel()
    assert rows_in_main_file() == 50
    await inbox.close()
    await engine.dispose()
