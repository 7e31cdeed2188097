"""A stopped turn stops its query: cancelling the task that awaits a query cancels it in the
database (DuckDB's interrupt, PostgreSQL's cancel request, MariaDB's KILL QUERY) instead of
leaving it running."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

import psycopg
import pymysql

from agent_core.data.duckdb_engine import run_duckdb_query
from agent_core.data.errors import QueryTimeout
from agent_core.data.interrupt import interruptible
from agent_core.data.sources import DataSourceConfig, query_source
from tests.test_sources import MYSQL_URL, PG_URL
from tests.waiting import eventually, scaled

# Minutes of work for either engine; their own time limit is set far beyond the test.
DUCKDB_SLOW = "SELECT sum((a.range * b.range) % 7) AS s FROM range(200000) a, range(200000) b"
POSTGRES_SLOW = "SELECT sum((a * b) % 7) AS s FROM generate_series(1, 200000) a, generate_series(1, 200000) b"
MARIADB_SLOW = "SELECT sum((a.seq * b.seq) % 7) AS s FROM seq_1_to_200000 a, seq_1_to_200000 b"


async def _cancel_while_running(
    query: Callable[[], object], running: Callable[[], bool] | None = None, *, at_once: bool = False
) -> str:
    """Stop the turn while its query runs; ``at_once``: the moment its thread starts, before the
    query reaches the database or in its first instant there."""
    outcome: queue.Queue[str] = queue.Queue()
    started = threading.Event()

    def run() -> None:
        started.set()
        try:
            query()
            outcome.put("finished")
        except QueryTimeout:  # how both engines report a query cancelled under them
            outcome.put("cancelled")

    task = asyncio.create_task(interruptible(run))
    while not started.is_set():
        await asyncio.sleep(0 if at_once else 0.01)
    if not at_once and running is None:  # the engine shows no running query from outside
        await asyncio.sleep(scaled(0.2))
    elif not at_once and running is not None:  # wait until it runs there, not merely starts
        await eventually(running, 30, "the query to run in the database", poll=0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return await asyncio.to_thread(outcome.get, True, scaled(120))


def _postgres_runs_the_slow_query() -> Callable[[], bool]:
    """Whether PostgreSQL runs POSTGRES_SLOW (as the guard renders it), started from now on.

    Running for a moment, not just shown as active: a cancel request that reaches the server
    the instant the query shows up there is ignored (the query then runs to its time limit).
    """
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        since = conn.execute("SELECT clock_timestamp()").fetchone()

    def running() -> bool:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            active = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query_start >= %s"
                " AND now() - query_start >= interval '0.2 s'"
                " AND position('generate_series(1, 200000)' in lower(query)) > 0 AND pid <> pg_backend_pid()",
                since,
            ).fetchone()
        return bool(active and active[0])

    return running


def _mariadb_slow_queries(running_for_ms: int = 0) -> int:
    """How many MARIADB_SLOW statements MariaDB runs now (that have run at least this long)."""
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", database="test")
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist WHERE command = 'Query'"
                " AND time_ms >= %s AND info LIKE %s AND id <> connection_id()",
                [running_for_ms, "%seq_1_to_200000 a%"],
            )
            row = cursor.fetchone()
    finally:
        conn.close()
    return int(row[0]) if row else 0


async def test_a_cancelled_duckdb_query_stops() -> None:
    assert await _cancel_while_running(lambda: run_duckdb_query(None, DUCKDB_SLOW, timeout_s=600)) == "cancelled"


async def test_a_cancelled_postgres_query_stops() -> None:
    cfg = DataSourceConfig(name="pg", url=PG_URL, statement_timeout_s=600, allow_privileged=True)
    running = _postgres_runs_the_slow_query()
    outcome = await _cancel_while_running(lambda: query_source(cfg, POSTGRES_SLOW, timeout_s=600), running)
    assert outcome == "cancelled"


async def test_a_duckdb_query_stopped_as_it_starts_does_not_run_on() -> None:
    assert await _cancel_while_running(lambda: run_duckdb_query(None, DUCKDB_SLOW, timeout_s=600), at_once=True) == "cancelled"


async def test_a_postgres_query_stopped_as_it_starts_does_not_run_on() -> None:
    cfg = DataSourceConfig(name="pg", url=PG_URL, statement_timeout_s=600, allow_privileged=True)
    for _ in range(3):  # the stop lands at a different moment of the start each time
        assert await _cancel_while_running(lambda: query_source(cfg, POSTGRES_SLOW, timeout_s=600), at_once=True) == "cancelled"


async def test_a_cancelled_mariadb_query_stops() -> None:
    cfg = DataSourceConfig(name="shop", url=MYSQL_URL, statement_timeout_s=600, allow_privileged=True)
    outcome = await _cancel_while_running(
        lambda: query_source(cfg, MARIADB_SLOW, timeout_s=600), lambda: _mariadb_slow_queries(running_for_ms=200) > 0
    )
    assert outcome == "cancelled"
    await eventually(lambda: _mariadb_slow_queries() == 0, 10, "the query to end on the server", poll=0.1)


async def test_a_mariadb_query_stopped_as_it_starts_does_not_run_on() -> None:
    cfg = DataSourceConfig(name="shop", url=MYSQL_URL, statement_timeout_s=600, allow_privileged=True)
    for _ in range(3):
        assert await _cancel_while_running(lambda: query_source(cfg, MARIADB_SLOW, timeout_s=600), at_once=True) == "cancelled"
    await eventually(lambda: _mariadb_slow_queries() == 0, 10, "no stopped query left running", poll=0.1)
