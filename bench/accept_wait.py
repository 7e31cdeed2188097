"""How long inbox accepts wait while a worker process writes (and, on SQLite, checkpoints).

The mechanism behind the busy ingest figure, without HTTP: this process accepts
events through the real `Inbox` at an open-loop `--rate`, while `--workers` worker processes
write the way answering workers do (leases, event status, thread rows, through the service's
engine) and each runs the service's `sqlite_checkpointer` every `--checkpoint-interval`
(the service's is 2 s; shorter here so a run sees many checkpoints). Every accept is timed
from its scheduled start, and the WAL file's header is read after each one: a changed
checkpoint sequence number means a writer restarted the WAL from its beginning.

Prints the accept latency distribution, the slow accepts (> `--slow-ms`) with what happened
around them (WAL restart, WAL size), and the WAL's largest size.

With `--database-url postgresql://…` (a fresh schema, dropped afterwards) it samples
pg_stat_activity every 2 ms instead and prints what the accept's INSERTs and the workers'
statements were waiting on (wait event counts: a WAL flush, a lock, the client).

    .venv/bin/python bench/accept_wait.py [--seconds 20] [--rate 200] [--workers 1] [--checkpoint-interval 0.2]
    .venv/bin/python bench/accept_wait.py --database-url postgresql://postgres@127.0.0.1:5432/test
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.synchronize import Event
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest_load import percentile  # noqa: E402
from bench.ingest_servers import GatewayDatabase  # noqa: E402


def message(n: int, tag: str):
    from agent_core.messages import InboundMessage, ThreadKey

    root = f"{n % 50}.1"
    return InboundMessage(
        platform="bench", event_id=f"{tag}{n}", message_id=f"{tag}.{n}", workspace="T1", channel="C1",
        thread=ThreadKey(platform="bench", workspace="T1", channel="C1", root=root),
        reply_in_thread=root, user="U1", text="hello " * 40,
    )


def worker(url: str, interval_s: float, ready: Event, stop: Event, seed: int) -> None:
    """Writes as an answering worker does, and checkpoints as the service does, until `stop`."""

    async def run() -> None:
        from agent_core.messages import ThreadKey
        from agent_core.store.db import create_engine, session_factory, sqlite_checkpointer
        from agent_core.store.threads import ThreadStore
        from gateway.service.inbox import Inbox

        engine = create_engine(url)
        inbox = Inbox(engine)
        store = ThreadStore(session_factory(engine))
        checkpointer = asyncio.create_task(sqlite_checkpointer(engine, interval_s))
        owner = f"worker-{seed}"
        ready.set()
        n = 0
        while not stop.is_set():
            n += 1
            for thread in await inbox.threads_with_work(limit=4):
                if await inbox.acquire_lease(thread, owner, 30):
                    event = await inbox.next_event(thread)
                    if event is not None and event.id is not None:
                        await inbox.start(event.id)
                        await store.open(ThreadKey(platform="bench", workspace=f"W{seed}", channel="C", root=f"{n}.{thread}"))
                        await inbox.finish(event.id, _done())
                    await inbox.release_lease(thread, owner)
            await asyncio.sleep(0.002)
        checkpointer.cancel()
        await inbox.close()
        await engine.dispose()

    asyncio.run(run())


def _done():
    from gateway.tables import EventStatus

    return EventStatus.DONE


def wal_header(path: Path) -> tuple[int, int]:
    """(checkpoint sequence number, file size) of the WAL file; (0, 0) when there is none."""
    try:
        with open(path, "rb") as f:
            header = f.read(16)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return 0, 0
    return (int.from_bytes(header[12:16], "big") if len(header) == 16 else 0), size


async def accept_load(url: str, wal: Path, rate: float, seconds: float) -> list[tuple[float, float, int, int]]:
    """Open-loop accepts; per accept (offset s, latency ms, WAL checkpoint seq, WAL size)."""
    from agent_core.store.db import create_engine
    from gateway.service.inbox import Inbox

    engine = create_engine(url)
    inbox = Inbox(engine)
    loop = asyncio.get_running_loop()
    results: list[tuple[float, float, int, int]] = []

    async def one(n: int, due: float) -> None:
        await inbox.accept(message(n, "a"))
        seq, size = wal_header(wal)
        results.append((due - start, (loop.time() - due) * 1000, seq, size))

    start = loop.time() + 0.1
    tasks = []
    for n in range(int(rate * seconds)):
        due = start + n / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        tasks.append(asyncio.create_task(one(n, due)))
    await asyncio.gather(*tasks)
    await inbox.close()
    await engine.dispose()
    print(f"accepts started at monotonic {start:.3f}")
    return sorted(results)


APPLICATION = "ba-accept-wait"  # how the run's connections show in pg_stat_activity


def sample_waits(db: GatewayDatabase, stop: threading.Event, waits: Counter[tuple[str, str]]) -> None:
    """Count, every 2 ms, what each active statement of the run's schema waits on."""
    import psycopg

    assert db.admin_url is not None
    with psycopg.connect(db.admin_url, autocommit=True) as conn:
        while not stop.is_set():
            for query, event in conn.execute(
                "SELECT left(query, 40), coalesce(wait_event_type || '/' || wait_event, 'CPU') FROM pg_stat_activity "
                "WHERE state = 'active' AND application_name = %s", (APPLICATION,)
            ).fetchall():
                waits[(" ".join(query.split()[:3]), event)] += 1
            time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="accepts/s")
    parser.add_argument("--workers", type=int, default=1, help="writing (SQLite: and checkpointing) processes")
    parser.add_argument("--checkpoint-interval", type=float, default=0.2, help="s (the service's: 2)")
    parser.add_argument("--slow-ms", type=float, default=10.0)
    parser.add_argument("--database-url", help="PostgreSQL server (default: SQLite in a temp dir)")
    args = parser.parse_args()
    waits: Counter[tuple[str, str]] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        db = GatewayDatabase.postgres(args.database_url) if args.database_url else GatewayDatabase.sqlite(Path(tmp))
        if db.schema:  # the sampler tells the run's connections from other clients' by their name
            db.url += f"&application_name={APPLICATION}"
        database = Path(tmp) / "bench.db"
        try:
            db.prepare()
            spawn = multiprocessing.get_context("spawn")
            stop = spawn.Event()
            ready = [spawn.Event() for _ in range(args.workers)]
            workers = [spawn.Process(target=worker, args=(db.url, args.checkpoint_interval, ready[n], stop, n))
                       for n in range(args.workers)]
            for proc in workers:
                proc.start()
            for event in ready:
                event.wait(120)
            sampling = threading.Event()
            sampler = threading.Thread(target=sample_waits, args=(db, sampling, waits)) if db.schema else None
            if sampler is not None:
                sampler.start()
            results = asyncio.run(accept_load(db.url, Path(f"{database}-wal"), args.rate, args.seconds))
            sampling.set()
            if sampler is not None:
                sampler.join()
            stop.set()
            for proc in workers:
                proc.join(timeout=30)
        finally:
            db.drop()
    latencies = [ms for _, ms, _, _ in results]
    restarts = sum(1 for a, b in zip(results, results[1:], strict=False) if b[2] != a[2])
    print(f"{len(results)} accepts at {args.rate:g}/s over {args.seconds:g} s on {'PostgreSQL' if db.schema else 'SQLite'}, "
          f"{args.workers} worker(s), load {os.getloadavg()[0]:.2f}")
    print(f"accept ms p50 {percentile(latencies, 0.5):.2f}  p99 {percentile(latencies, 0.99):.2f}  "
          f"p99.9 {percentile(latencies, 0.999):.2f}  max {max(latencies):.2f}; "
          f"> {args.slow_ms:g} ms: {sum(ms > args.slow_ms for ms in latencies)}")
    if db.schema:
        print("statements seen active (every 2 ms), by what they waited on:")
        for (query, event), count in waits.most_common(15):
            print(f"  {count:6d}  {event:28s} {query}")
        return
    print(f"checkpoints every {args.checkpoint_interval:g} s; WAL restarts seen {restarts}, "
          f"largest WAL {max(size for *_, size in results) / 1e6:.1f} MB")
    previous_seq = results[0][2]
    for offset, ms, seq, size in results:
        if ms > args.slow_ms:
            note = "  WAL restarted" if seq != previous_seq else ""
            print(f"  t={offset:7.3f} s  {ms:7.2f} ms  WAL {size / 1e6:6.2f} MB{note}")
        previous_seq = seq


if __name__ == "__main__":
    main()
