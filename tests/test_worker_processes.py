"""`ba-agent serve` answers through worker processes it supervises (BA_WORKER_PROCESSES).

The serve process only accepts; workers answer. New work reaches a worker at once (no polling
wait), a worker that dies is replaced, and workers never outlive serve, even a SIGKILLed one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from agent_core.messages import InboundMessage, ThreadKey
from agent_core.store.db import create_engine
from gateway.service.inbox import Inbox
from gateway.service.inbox_postgres import CHANNEL, listener_name
from gateway.service.worker_pool import FULL_LINE, READY_LINE, ROOM_LINE, WorkerPool
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import SIGNING_SECRET
from tests.serve_process import (
    BA_AGENT,
    alive,
    children,
    clean_env,
    free_port,
    get_json,
    post_event,
    start,
    stop,
    wait_healthy,
    wait_workers_ready,
)
from tests.waiting import eventually, scaled
from tests.waiting import eventually_sync as wait_until


def gateway_env(tmp_path: Path, database_url: str, anthropic: FakeAnthropic, slack: FakeSlack, **extra: str) -> dict[str, str]:
    return clean_env(
        tmp_path,
        DATABASE_URL=database_url,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=anthropic.base_url,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.base_url,
        # Far longer than any wait below: an answer in time proves the worker was woken.
        BA_POLL_INTERVAL="60",
        **extra,
    )


def test_worker_answers_at_once_and_is_replaced_when_it_dies(database_url: str, tmp_path: Path) -> None:
    with FakeAnthropic.in_thread() as anthropic, \
            FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.script(Reply([text("First answer.")]), Reply([text("Second answer.")]))
        env = gateway_env(tmp_path, database_url, anthropic, slack, BA_WORKER_PROCESSES="2")
        port = free_port()
        serve = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            assert wait_workers_ready(port) == {"ready": 2, "configured": 2}
            workers = children(serve.pid)
            assert len(workers) == 2

            assert post_event(port, app_mention("<@UBOT> first?", "U1", "C1", ts="1700000001.000100")) == 200
            slack.wait_for_sync("chat.stopStream", count=1, timeout=15)  # answers stream

            os.kill(workers[0], signal.SIGKILL)
            wait_until(lambda: get_json(port, "/readyz")[1]["workers"]["ready"] < 2, 10, "the dead worker to show")
            assert get_json(port, "/readyz")[0] == 200  # accepting does not depend on workers
            assert wait_workers_ready(port) == {"ready": 2, "configured": 2}
            assert workers[0] not in children(serve.pid) and len(children(serve.pid)) == 2

            assert post_event(port, app_mention("<@UBOT> second?", "U1", "C2", ts="1700000002.000100")) == 200
            slack.wait_for_sync("chat.stopStream", count=2, timeout=15)
        finally:
            out = stop(serve)
        answers = {p["channel"]: p["markdown_text"] for p in slack.posted()}
        assert answers == {"C1": "First answer.", "C2": "Second answer."}
        assert "exited with code -9; restarting" in out


def test_a_worker_that_was_full_is_woken_for_new_work_again(database_url: str, tmp_path: Path) -> None:
    # One turn at a time, polling only every 60 s: the second mention arrives while the worker
    # is full (serve stops waking it), the third once it is idle again. Each is answered well
    # within the poll interval: the full worker took the second when its turn ended, and serve
    # woke it for the third (on SQLite only serve can; PostgreSQL's notification would too).
    with FakeAnthropic.in_thread() as anthropic, \
            FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.script(Reply([text("First answer.")], event_delay=0.4), Reply([text("Second answer.")]),
                         Reply([text("Third answer.")]))
        env = gateway_env(tmp_path, database_url, anthropic, slack, BA_WORKER_PROCESSES="1",
                          BA_MAX_CONCURRENT_TURNS="1")
        port = free_port()
        serve = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> first?", "U1", "C1", ts="1700000001.000100")) == 200
            slack.wait_for_sync("chat.startStream", count=1, timeout=15)  # the one turn is taken
            assert post_event(port, app_mention("<@UBOT> second?", "U1", "C2", ts="1700000002.000100")) == 200
            slack.wait_for_sync("chat.stopStream", count=2, timeout=20)
            time.sleep(scaled(1))  # the worker has settled the second and waits for work
            assert post_event(port, app_mention("<@UBOT> third?", "U1", "C3", ts="1700000003.000100")) == 200
            slack.wait_for_sync("chat.stopStream", count=3, timeout=15)
        finally:
            stop(serve)
        answers = {p["channel"]: p["markdown_text"] for p in slack.posted()}
        assert answers == {"C1": "First answer.", "C2": "Second answer.", "C3": "Third answer."}


# A stand-in worker: says it is ready and full, records every wakeup byte it reads, and says it
# has room once the test creates the file named by its second argument; it stops when its stdin ends.
FULL_THEN_ROOM = f"""
import os, sys, threading, time
out = sys.stdout.buffer
out.write({FULL_LINE!r} + {READY_LINE!r})
out.flush()
def record():
    while sys.stdin.buffer.read1(64):
        with open(sys.argv[1], "a") as log:
            log.write("woken\\n")
reader = threading.Thread(target=record)
reader.start()
while not os.path.exists(sys.argv[2]) and reader.is_alive():
    time.sleep(0.05)
out.write({ROOM_LINE!r})
out.flush()
reader.join()  # until serve closes the pipe
"""


async def test_serve_does_not_wake_a_worker_that_is_full(tmp_path: Path) -> None:
    woken, room = tmp_path / "woken", tmp_path / "room"
    pool = WorkerPool(1, command=[sys.executable, "-c", FULL_THEN_ROOM, str(woken), str(room)])
    await pool.start()
    try:
        await eventually(lambda: pool.ready == 1, 15, "the worker to be ready")
        for _ in range(3):
            pool.wake()
        await asyncio.sleep(0.5)
        assert not woken.exists()  # full: none of the three reached it
        room.touch()
        await eventually(lambda: woken.exists(), 10, "the wakeup that comes with room")
        pool.wake()
        await eventually(lambda: woken.read_text().count("woken") == 2, 10, "the next wakeup")
    finally:
        await pool.stop()


def test_workers_stop_when_serve_is_killed(tmp_path: Path) -> None:
    port = free_port()
    serve = start(clean_env(tmp_path), port, tmp_path)
    try:
        wait_healthy(port)
        wait_workers_ready(port)
        workers = children(serve.pid)
        assert workers and all(alive(pid) for pid in workers)
        # Answering yields the CPU to acknowledging (README: Processes).
        serve_nice = os.getpriority(os.PRIO_PROCESS, serve.pid)
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == serve_nice + 10 for pid in workers)
    finally:
        serve.kill()  # SIGKILL: serve cannot tell its workers anything
        serve.communicate()
    wait_until(lambda: not any(alive(pid) for pid in workers), 15, "orphaned workers to exit")


def test_workers_stop_with_serve_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    serve = start(clean_env(tmp_path), port, tmp_path)
    try:
        wait_healthy(port)
        wait_workers_ready(port)
        workers = children(serve.pid)
    finally:
        out = stop(serve)
    assert serve.returncode == 0
    assert not any(alive(pid) for pid in workers)
    assert "exited with code" not in out  # a requested stop is not a crash


def listening(database_url: str, pid: int) -> bool:
    """Whether process `pid` has a connection LISTENing for new inbox events."""
    with psycopg.connect(database_url.split("?")[0], autocommit=True) as conn:
        row = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s", (listener_name(pid),)
        ).fetchone()
    return row is not None and row[0] == f"LISTEN {CHANNEL}"


async def accept_on_another_replica(database_url: str) -> None:
    engine = create_engine(database_url)
    inbox = Inbox(engine)
    root = "1700000003.000100"
    try:
        await inbox.accept(
            InboundMessage(
                platform="slack", event_id="Ev3", message_id=root, workspace="T1", channel="C3",
                thread=ThreadKey(platform="slack", workspace="T1", channel="C3", root=root),
                reply_in_thread=root, user="U1", text="third?",
            )
        )
    finally:
        await inbox.close()
        await engine.dispose()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_worker_hears_of_work_accepted_by_another_replica(database_url: str, tmp_path: Path) -> None:
    # A worker on its own (another host or container) polls only every 60 s here: an answer
    # within the wait below proves the database told it.
    with FakeAnthropic.in_thread() as anthropic, \
            FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.script(Reply([text("Third answer.")]))
        env = gateway_env(tmp_path, database_url, anthropic, slack)
        worker = subprocess.Popen([BA_AGENT, "worker"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        try:
            wait_until(lambda: listening(database_url, worker.pid), 60, "the worker to listen")
            asyncio.run(accept_on_another_replica(database_url))
            slack.wait_for_sync("chat.stopStream", count=1, timeout=15)
        finally:
            stop(worker)
        assert [p["markdown_text"] for p in slack.posted()] == ["Third answer."]
