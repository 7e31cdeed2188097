"""The accept path: group-committed accepts and the live-thread question (both databases), and
NOTIFY wakeups across replicas (PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg
import pytest

from adapters.base import AcceptOutcome
from agent_core.messages import InboundMessage, ThreadKey
from agent_core.store.db import session_factory
from agent_core.store.threads import ThreadStore
from gateway.config import load_settings
from gateway.service.inbox import Inbox
from gateway.service.inbox_postgres import listener_name
from gateway.service.runtime import open_stores
from tests.waiting import scaled

only_postgres = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def delivery(event_id: str, ts: str, channel: str = "C1") -> InboundMessage:
    return InboundMessage(
        platform="slack",
        event_id=event_id,
        message_id=ts,
        workspace="T1",
        channel=channel,
        thread=ThreadKey(platform="slack", workspace="T1", channel=channel, root=ts),
        reply_in_thread=ts,
        user="U1",
        text="how are sales?",
    )


async def test_concurrent_deliveries_of_one_message_store_it_once(inbox: Inbox) -> None:
    # Slack sends a mention as `app_mention` and `message`, and retries what it thinks was
    # lost: all of them at once, as under load, must come down to one stored event each.
    deliveries = []
    for i in range(40):
        ts = f"1700000{i:03d}.000100"
        deliveries += [delivery(f"EvA{i}", ts), delivery(f"EvM{i}", ts), delivery(f"EvA{i}", ts)]
    outcomes = await asyncio.gather(*(inbox.accept(d) for d in deliveries))
    for i in range(40):
        assert sorted(outcomes[3 * i : 3 * i + 3]) == sorted(
            [AcceptOutcome.ACCEPTED, AcceptOutcome.DUPLICATE, AcceptOutcome.DUPLICATE]
        )
    assert await inbox.open_events() == 40


async def test_a_delivery_whose_caller_gave_up_is_still_stored_once(engine) -> None:
    inbox = Inbox(engine)
    await inbox.open()
    accepting = asyncio.create_task(inbox.accept(delivery("Ev1", "1700000001.000100")))
    await asyncio.sleep(0)  # the delivery is on its way to the database ...
    accepting.cancel()  # ... when the platform's client stops waiting for the acknowledgement
    with contextlib.suppress(asyncio.CancelledError):
        await accepting
    await inbox.close()

    restarted = Inbox(engine)
    try:
        assert await restarted.accept(delivery("Ev1", "1700000001.000100")) is AcceptOutcome.DUPLICATE
        assert await restarted.open_events() == 1
    finally:
        await restarted.close()


async def test_the_accept_path_knows_the_threads_the_bot_is_part_of(inbox: Inbox, engine) -> None:
    store = ThreadStore(session_factory(engine))
    live = ThreadKey(platform="slack", workspace="T1", channel="C1", root="1700000001.000100")
    reset = ThreadKey(platform="slack", workspace="T1", channel="D1", root="main")
    unknown = ThreadKey(platform="slack", workspace="T1", channel="C1", root="1700000009.000100")
    await store.open(live)
    await store.open(reset)
    await store.reset(reset)  # "new conversation": follow-ups there need a mention again
    assert [await inbox.thread_is_live(key) for key in (live, reset, unknown)] == [True, False, False]
    assert [await store.is_live(key) for key in (live, reset, unknown)] == [True, False, False]


async def test_a_thread_reply_is_stored_only_while_its_thread_is_live(inbox: Inbox, engine) -> None:
    store = ThreadStore(session_factory(engine))
    live = ThreadKey(platform="slack", workspace="T1", channel="C1", root="1700000001.000100")
    await store.open(live)

    def reply(event_id: str, ts: str, thread: ThreadKey) -> InboundMessage:
        return delivery(event_id, ts).model_copy(update={"thread": thread, "reply_in_thread": thread.root})

    unknown = live.model_copy(update={"root": "1700000009.000100"})
    outcomes = await asyncio.gather(
        inbox.accept(reply("EvR1", "1700000001.000200", live), if_thread_live=True),
        inbox.accept(reply("EvR2", "1700000009.000200", unknown), if_thread_live=True),
        inbox.accept(delivery("EvM1", "1700000009.000300")),  # a mention: stored either way
        inbox.accept(reply("EvR1", "1700000001.000200", live), if_thread_live=True),  # Slack's retry
    )
    assert outcomes == [AcceptOutcome.ACCEPTED, AcceptOutcome.NOT_IN_LIVE_THREAD, AcceptOutcome.ACCEPTED,
                        AcceptOutcome.DUPLICATE]  # fmt: skip
    # One at a time, as a quiet service gets them (each alone in its statement):
    one_by_one = [
        await inbox.accept(reply("EvR4", "1700000001.000400", live), if_thread_live=True),
        await inbox.accept(reply("EvR4", "1700000001.000400", live), if_thread_live=True),
        await inbox.accept(reply("EvR5", "1700000009.000500", unknown), if_thread_live=True),
    ]
    assert one_by_one == [AcceptOutcome.ACCEPTED, AcceptOutcome.DUPLICATE, AcceptOutcome.NOT_IN_LIVE_THREAD]
    await store.reset(live)  # "new conversation": replies there need a mention again
    later = await inbox.accept(reply("EvR3", "1700000001.000300", live), if_thread_live=True)
    assert later is AcceptOutcome.NOT_IN_LIVE_THREAD
    assert await inbox.open_events() == 3


@only_postgres
async def test_with_durability_flush_an_accept_returns_once_its_event_is_on_disk(database_url: str, tmp_path) -> None:
    # BA_INBOX_DURABILITY=flush: an acknowledged event must survive a power loss too, so each
    # accept returns only once the server has flushed its log past the event's commit (by
    # default the log writer flushes within a fraction of a second, after the accept).
    settings = load_settings(platforms=(), _env_file=None, DATABASE_URL=database_url, BA_DATA_DIR=str(tmp_path),
                             BA_INBOX_DURABILITY="flush")
    stores = open_stores(settings)
    await stores.inbox.open()
    try:
        with psycopg.connect(database_url.split("?")[0], autocommit=True) as observer:
            for i in range(20):  # more than another session's flushes could cover by chance
                [[logged_before]] = observer.execute("SELECT pg_current_wal_insert_lsn()").fetchall()
                assert await stores.inbox.accept(delivery(f"Ev{i}", f"17000000{i:02d}.000100")) is AcceptOutcome.ACCEPTED
                [[on_disk]] = observer.execute(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_flush_lsn(), %s::pg_lsn)", (logged_before,)
                ).fetchall()
                assert on_disk > 0
    finally:
        await stores.inbox.close()
        await stores.engine.dispose()


@pytest.fixture
async def replicas(engine) -> AsyncIterator[tuple[Inbox, Inbox]]:
    """Two inboxes on one database, as two replicas of the service would have."""
    first, second = Inbox(engine), Inbox(engine)
    yield first, second
    await first.close()
    await second.close()


async def next_wakeup(inbox: Inbox) -> None:
    async with asyncio.timeout(scaled(30)):  # a hang guard, not a speed requirement
        await inbox.wakeup.wait()
    inbox.wakeup.clear()


@only_postgres
async def test_an_accept_on_one_replica_wakes_the_workers_of_another(replicas) -> None:
    accepting, answering = replicas
    listener = asyncio.create_task(answering.listen_for_work())
    try:
        await next_wakeup(answering)  # listening: it looks once for what it may have missed
        assert await accepting.accept(delivery("Ev1", "1700000001.000100")) is AcceptOutcome.ACCEPTED
        await next_wakeup(answering)
        assert await answering.threads_with_work() == ["slack:T1:C1:1700000001.000100"]
    finally:
        listener.cancel()


@only_postgres
async def test_the_listener_comes_back_after_its_connection_is_killed(replicas, database_url: str) -> None:
    accepting, answering = replicas
    listener = asyncio.create_task(answering.listen_for_work(retry_s=0.05))
    try:
        await next_wakeup(answering)
        with psycopg.connect(database_url.split("?")[0], autocommit=True) as admin:
            pids = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (listener_name(),)
            ).fetchall()
            assert len(pids) == 1
            admin.execute("SELECT pg_terminate_backend(%s)", pids[0])
        await next_wakeup(answering)  # listening again, and looking for what it missed
        await accepting.accept(delivery("Ev2", "1700000002.000100"))
        await next_wakeup(answering)
        assert await answering.threads_with_work() == ["slack:T1:C1:1700000002.000100"]
    finally:
        listener.cancel()
