"""Open-loop load for the ingest benchmark, and the statistics it reports.

Deliveries are sent on a fixed schedule whether or not earlier ones were answered, and each
latency is counted from the delivery's SCHEDULED send time: a generator that falls behind
shows up in the figures instead of hiding in them. A delivery not answered within the client
timeout (Slack waits 3 s) counts as a timeout, and the client stops waiting for it, as Slack
does.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from dataclasses import dataclass, field

import aiohttp

from bench.ingest_mix import Delivery

MAX_CONNECTIONS = 500


@dataclass
class Sample:
    """What one side saw in one round."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    timeouts: int = 0
    acknowledged: set[str] = field(default_factory=set)  # messages with a delivery answered 200
    probes_ms: list[float] = field(default_factory=list)  # GET /healthz meanwhile (see offered_load)

    def extend(self, other: Sample) -> None:
        self.latencies_ms += other.latencies_ms
        self.probes_ms += other.probes_ms
        self.errors += other.errors
        self.timeouts += other.timeouts
        self.acknowledged |= other.acknowledged

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 0.99)

    def line(self) -> str:
        return (f"n={len(self.latencies_ms):6d}  p50 {self.p50:7.2f} ms  p99 {self.p99:8.2f} ms  "
                f"errors {self.errors}  timeouts {self.timeouts}")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def spread(values: list[float]) -> str:
    """Median with min–max and interquartile range, e.g. of per-round ratios."""
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "n/a"
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (f"median {statistics.median(values):.2f}  (min {min(values):.2f} – max {max(values):.2f}, "
            f"IQR {q1:.2f}–{q3:.2f}, {len(values)} rounds)")


async def offered_load(
    urls: list[str], deliveries: list[Delivery], rate: float, timeout_s: float, probe_rate: float = 0.0
) -> list[Sample]:
    """Send `deliveries` at `rate`/s, round-robin over `urls` (replicas behind a balancer);
    one Sample per URL.

    With `probe_rate`, each server also gets GET /healthz that many times a second, timed into
    `Sample.probes_ms`: the health check answers from the event loop alone, so a slow probe
    means the server's loop (or its CPU) stalled, and a slow delivery with quick probes means
    the delivery waited for something else (the database)."""
    samples = [Sample() for _ in urls]
    loop = asyncio.get_running_loop()

    async def probe(session: aiohttp.ClientSession, target: int, until: float) -> None:
        health = urls[target].rsplit("/", 2)[0] + "/healthz"
        due = loop.time()
        while due < until:
            await asyncio.sleep(max(0.0, due - loop.time()))
            with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                async with asyncio.timeout_at(due + timeout_s), session.get(health) as resp:
                    await resp.read()
                    samples[target].probes_ms.append((loop.time() - due) * 1000)
            due += 1 / probe_rate

    async def send(session: aiohttp.ClientSession, target: int, delivery: Delivery, due: float) -> None:
        sample = samples[target]
        try:
            async with asyncio.timeout_at(due + timeout_s):
                async with session.post(urls[target], data=delivery.body, headers=delivery.headers) as resp:
                    await resp.read()
        except TimeoutError:
            sample.timeouts += 1
            return
        except aiohttp.ClientError:
            sample.errors += 1
            return
        if resp.status != 200:
            sample.errors += 1
            return
        sample.latencies_ms.append((loop.time() - due) * 1000)
        sample.acknowledged.add(delivery.message)

    # As many connections as a sender keeps open at most: past that, deliveries queue in the
    # client (their latency still counts from the schedule) instead of drowning both sides.
    connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        tasks = []
        start = loop.time() + 0.05
        if probe_rate:
            end = start + len(deliveries) / rate
            tasks += [asyncio.create_task(probe(session, target, end)) for target in range(len(urls))]
        for i, delivery in enumerate(deliveries):
            due = start + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(session, i % len(urls), delivery, due)))
        await asyncio.gather(*tasks)
    return samples
