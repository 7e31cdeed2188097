"""A stopped turn stops its query: cancelling the task that awaits a query cancels it in the
database (DuckDB's interrupt, PostgreSQL's cancel request) instead of leaving it running."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

from agent_core.data.duckdb_engine import run_duckdb_query
from agent_core.data.errors import QueryTimeout
from agent_core.data.interrupt import interruptible
from agent_core.data.sources import DataSourceConfig, query_source
from tests.test_sources import PG_URL

# Minutes of work for either engine; their own time limit is set far beyond the test.
DUCKDB_SLOW = "SELECT sum((a.range * b.range) % 7) AS s FROM range(200000) a, range(200000) b"
POSTGRES_SLOW = "SELECT sum((a * b) % 7) AS s FROM generate_series(1, 200000) a, generate_series(1, 200000) b"


async def _cancel_while_running(query: Callable[[], object]) -> str:
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
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)  # inside the engine by now (if not, it is cancelled on arrival)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return await asyncio.to_thread(outcome.get, True, 120)


async def test_a_cancelled_duckdb_query_stops() -> None:
    assert await _cancel_while_running(lambda: run_duckdb_query(None, DUCKDB_SLOW, timeout_s=600)) == "cancelled"


async def test_a_cancelled_postgres_query_stops() -> None:
    cfg = DataSourceConfig(name="pg", url=PG_URL, statement_timeout_s=600, allow_privileged=True)
    assert await _cancel_while_running(lambda: query_source(cfg, POSTGRES_SLOW, timeout_s=600)) == "cancelled"
