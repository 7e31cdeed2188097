"""How long a worker's look for work takes as the backlog grows, on a table without statistics.

Every time a worker has a free slot it asks the inbox for the threads whose oldest open event
is due and unleased (`Inbox.threads_with_work`). That query runs on the database that takes
the acknowledgements, so what it costs is CPU the accepts do not get. This bench fills a
fresh inbox with a backlog in the ingest bench's shape (35 % follow-ups spread over 50 busy
threads, the rest each a thread of its own), leases 8 threads as busy workers do, and times
the query at each backlog size. The tables are never analyzed, as after a burst on a server
whose autovacuum has not caught up (or is off): the plan must hold without statistics.

    .venv/bin/python bench/claim.py [--sizes 300,1000,3000,10000] [--database-url postgresql://postgres@127.0.0.1:5432/test]

Target: under 10 ms, and the same at any backlog (a look reads a window of the oldest open
events, not all of them).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest_servers import GatewayDatabase  # noqa: E402

BUSY_THREADS = 50
FOLLOW_UP_SHARE = 0.35
LEASED = 8


def message(n: int, rng: random.Random):
    from agent_core.messages import InboundMessage, ThreadKey

    root = f"busy{rng.randrange(BUSY_THREADS)}" if rng.random() < FOLLOW_UP_SHARE else f"own{n}"
    return InboundMessage(
        platform="bench", event_id=f"e{n}", message_id=f"m{n}", workspace="T1", channel="C1",
        thread=ThreadKey(platform="bench", workspace="T1", channel="C1", root=root),
        reply_in_thread=root, user="U1", text="how did sales move last week? " * 10,
    )


async def measure(url: str, sizes: list[int], calls: int) -> None:
    from agent_core.store.db import create_engine
    from gateway.service.inbox import Inbox

    engine = create_engine(url)
    inbox = Inbox(engine)
    rng = random.Random(1)
    accepted = 0
    for size in sizes:
        while accepted < size:
            await asyncio.gather(*(inbox.accept(message(n, rng)) for n in range(accepted, min(size, accepted + 200))))
            accepted = min(size, accepted + 200)
        for thread in (await inbox.threads_with_work(limit=LEASED))[:LEASED]:
            await inbox.acquire_lease(thread, f"worker-{thread}", 600)
        timings = []
        for _ in range(calls):
            started = time.perf_counter()
            offered = await inbox.threads_with_work()
            timings.append((time.perf_counter() - started) * 1000)
        print(f"{await inbox.open_events():6d} open events  threads_with_work median {statistics.median(timings):7.2f} ms "
              f"(min {min(timings):.2f}, max {max(timings):.2f}; {len(offered)} threads offered)", flush=True)
    await inbox.close()
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,1000,3000,10000", help="backlog sizes, comma-separated")
    parser.add_argument("--calls", type=int, default=20, help="timed queries per size")
    parser.add_argument("--database-url", help="PostgreSQL server (a fresh schema, dropped afterwards); default SQLite")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        db = (GatewayDatabase.postgres(args.database_url.replace("postgresql+psycopg://", "postgresql://"))
              if args.database_url else GatewayDatabase.sqlite(Path(tmp)))
        try:
            db.prepare()
            print(f"database {'PostgreSQL' if db.schema else 'SQLite'}, tables not analyzed", flush=True)
            asyncio.run(measure(db.url, sizes, args.calls))
        finally:
            db.drop()


if __name__ == "__main__":
    main()
