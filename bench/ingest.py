"""Ingest benchmark: how fast signed Slack deliveries are acknowledged, against a bare floor.

Two servers run as their own processes on loopback and take the same offered load (open
loop, the realistic mix of bench/ingest_mix.py, latency from the scheduled send time, a 3 s
client timeout as Slack's):

- the floor: a bare slack-bolt AsyncApp on aiohttp whose listeners do nothing;
- the gateway: `ba-agent serve` (bolt verification, parsing, the thread lookup of follow-ups,
  the inbox commit before the 200) with its worker processes answering in the background
  through a fake model that streams each answer over `--answer-seconds`.

Before the rounds, `--live-threads` conversations (16) are opened and the bench waits until
the workers are answering them: every round is then acknowledged while each answering process
holds its `--turns` turns and writes their messages, ledger rows and leases (`--live-threads 0`
starts with idle workers). The two sides of a round take the same seeded traffic.

They are measured in alternating rounds (floor, gateway, floor, gateway, …), so a noisy
neighbour or a drifting machine hits both alike; the verdict is the per-round ratio of p99s,
reported as its median with its spread over the rounds. Every figure is printed with the
machine's load average. `--probe-rate 20` also times GET /healthz on both sides during the
rounds: a stall that slows the probes too is the server's event loop (or CPU), one that
slows only the deliveries is the database.

Modes:
- default: `--rounds` rounds a side of `--seconds` at `--rate` deliveries/s;
- `--sustained`: first finds how many messages/s the workers can answer, then offers that
  (a backlog that stays flat), printing the backlog after each round and the answer latency;
- `--curve 200,500,1000,2000`: one round a side per rate, p50/p99/errors/timeouts per rate.
`--durability flush` acknowledges each delivery only once the database has flushed it to disk
(BA_INBOX_DURABILITY; the default, commit, once it is committed).
`--database-url postgresql://postgres@127.0.0.1:5432/test` runs the gateway on PostgreSQL (a
fresh schema, dropped afterwards; default SQLite in a temp dir); `--replicas 2` runs two
gateways on that one database behind a round-robin balancer (and two floors likewise). At
the end the stored events are counted against the distinct messages sent: each must be stored
exactly once, those whose acknowledgement timed out included.

Targets: PostgreSQL p99 <= 2x the floor at 200/s and < 100 ms at 1,000/s per replica; SQLite
p99 <= 1.3x the floor at 200/s; both hold 2,000/s with no error.

    .venv/bin/python bench/ingest.py [--rate 200] [--rounds 10] [--seconds 6] [--live-threads 16] [--database-url URL]
    .venv/bin/python bench/ingest.py --curve 200,500,1000,2000 [--database-url URL] [--replicas 2]
    .venv/bin/python bench/ingest.py --sustained --turns 32 --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ingest_load import Sample, offered_load, percentile, spread  # noqa: E402
from bench.ingest_mix import Delivery, deliveries_per_message, fresh_mentions, realistic_mix  # noqa: E402
from bench.ingest_servers import (  # noqa: E402
    GatewayDatabase,
    gateway_env,
    serve_fakes,
    start_floor,
    start_gateway,
    stop_process,
    wait_ready,
)


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    """One of the two systems under test: its replicas' URLs and what it has seen so far."""

    name: str
    urls: list[str]
    pids: list[int]
    total: Sample = field(default_factory=Sample)
    per_replica: list[Sample] = field(default_factory=list)
    sent: set[str] = field(default_factory=set)  # the distinct messages sent

    def run(self, rate: float, seconds: float, timeout_s: float, tag: str, seed: str | None = None,
            probe_rate: float = 0.0) -> tuple[Sample, float]:
        """One round; returns its sample and the servers' CPU ms per delivery. Rounds given the
        same `seed` send the same sequence of messages (as distinct events)."""
        deliveries = realistic_mix(int(rate * seconds), tag, seed)
        cpu_before = sum(cpu_seconds(pid) for pid in self.pids)
        samples = self.send(deliveries, rate, timeout_s, probe_rate)
        cpu_ms = (sum(cpu_seconds(pid) for pid in self.pids) - cpu_before) * 1000 / max(len(deliveries), 1)
        sample = Sample()
        for replica, part in enumerate(samples):
            sample.extend(part)
            if len(self.per_replica) <= replica:
                self.per_replica.append(Sample())
            self.per_replica[replica].extend(part)
        self.total.extend(sample)
        return sample, cpu_ms

    def send(self, deliveries: list[Delivery], rate: float, timeout_s: float, probe_rate: float = 0.0) -> list[Sample]:
        self.sent |= {d.message for d in deliveries}
        # A collection of the bench's own growing heap mid-round pauses the sender, and the
        # pause would be charged to whichever server it was timing: collect now, not during.
        gc.collect()
        gc.disable()
        try:
            samples = asyncio.run(offered_load(self.urls, deliveries, rate, timeout_s, probe_rate))
        finally:
            gc.enable()
        self.total.acknowledged.update(*(s.acknowledged for s in samples))
        return samples


def ab_rounds(floor: Side, gateway: Side, db: GatewayDatabase, args: argparse.Namespace, rate: float) -> list[float]:
    """Alternate the two sides for `args.rounds` rounds each; returns the per-round p99 ratios."""
    ratios = []
    for round_no in range(1, args.rounds + 1):
        seed = f"{round_no}:{rate:g}"  # the pair takes the same traffic
        floor_sample, floor_cpu = floor.run(rate, args.seconds, args.timeout, f"f{round_no}r{rate:g}", seed,
                                            args.probe_rate)
        floor_load = load()
        gw_sample, gw_cpu = gateway.run(rate, args.seconds, args.timeout, f"g{round_no}r{rate:g}", seed,
                                        args.probe_rate)
        ratio = gw_sample.p99 / floor_sample.p99
        ratios.append(ratio)
        print(f"round {round_no:2d}  floor p50 {floor_sample.p50:6.2f} p99 {floor_sample.p99:7.2f} ms "
              f"({floor_cpu:.2f} ms CPU/delivery, {floor_load})  gateway p50 {gw_sample.p50:6.2f} "
              f"p99 {gw_sample.p99:7.2f} ms ({gw_cpu:.2f} ms CPU/delivery, {load()})  ratio {ratio:5.2f}  "
              f"errors {gw_sample.errors + floor_sample.errors}  timeouts {gw_sample.timeouts + floor_sample.timeouts}  "
              f"backlog {db.open_events()}  turns in progress {db.turns_in_progress()}", flush=True)
        if args.probe_rate:
            print(f"round {round_no:2d}  /healthz meanwhile: floor {probes(floor_sample)}  "
                  f"gateway {probes(gw_sample)}", flush=True)
    return ratios


def probes(sample: Sample) -> str:
    """The health-check probes of a round: the server's event loop stalls, if any."""
    if not sample.probes_ms:
        return "n/a"
    return (f"p50 {percentile(sample.probes_ms, 0.5):.2f} p99 {percentile(sample.probes_ms, 0.99):.2f} "
            f"max {max(sample.probes_ms):.2f} ms")


def make_workers_busy(gateway: Side, db: GatewayDatabase, args: argparse.Namespace) -> None:
    """Open `--live-threads` conversations and wait until the workers are answering them, so
    every round is acknowledged while the workers write messages, ledger rows and leases."""
    if not args.live_threads:
        return
    gateway.send(fresh_mentions(args.live_threads, "live"), 50, args.timeout)
    capacity = args.workers * args.turns * len(gateway.urls)
    expected = min(args.live_threads, capacity)
    deadline = time.monotonic() + 60
    while db.turns_in_progress() < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"busy workers: {db.turns_in_progress()} turns in progress (capacity {capacity}), "
          f"{db.open_events()} events open, answers take {args.answer_seconds:g} s", flush=True)


def curve(floor: Side, gateway: Side, db: GatewayDatabase, args: argparse.Namespace) -> None:
    replicas = len(gateway.urls)
    for rate in (float(r) for r in args.curve.split(",")):
        floor_sample, floor_cpu = floor.run(rate, args.seconds, args.timeout, f"fc{rate:g}")
        floor_load = load()
        gw_sample, gw_cpu = gateway.run(rate, args.seconds, args.timeout, f"gc{rate:g}")
        print(f"{rate:6g}/s ({rate / replicas:g}/s per replica)  floor p50 {floor_sample.p50:7.2f} "
              f"p99 {floor_sample.p99:8.2f} ms errors {floor_sample.errors} timeouts {floor_sample.timeouts} "
              f"({floor_cpu:.2f} ms CPU, {floor_load})  |  gateway p50 {gw_sample.p50:7.2f} p99 {gw_sample.p99:8.2f} ms "
              f"errors {gw_sample.errors} timeouts {gw_sample.timeouts} ({gw_cpu:.2f} ms CPU, {load()})  "
              f"backlog {db.open_events()}", flush=True)


def wait_for_backlog(db: GatewayDatabase, limit_s: float) -> float:
    """Wait until every stored event is answered (at most `limit_s`); returns the seconds waited."""
    started = time.monotonic()
    while db.open_events() and time.monotonic() - started < limit_s:
        time.sleep(0.2)
    return time.monotonic() - started


def answer_capacity(gateway: Side, db: GatewayDatabase, args: argparse.Namespace) -> float:
    """Messages/s the workers answer: a burst of the mix, timed until it is all answered."""
    wait_for_backlog(db, 120)
    burst = realistic_mix(int(6 * args.turns * args.workers * len(gateway.urls) * deliveries_per_message()), "cal")
    messages = len({d.message for d in burst})
    started = time.monotonic()
    gateway.send(burst, 200, args.timeout)
    waited = wait_for_backlog(db, 300)
    elapsed = time.monotonic() - started
    if waited >= 300:
        raise SystemExit("the workers did not answer the calibration burst within 5 minutes")
    return messages / elapsed


def sustained(floor: Side, gateway: Side, db: GatewayDatabase, args: argparse.Namespace) -> list[float]:
    capacity = answer_capacity(gateway, db, args)
    rate = capacity * deliveries_per_message()
    print(f"the workers answer {capacity:.1f} messages/s ({args.workers} worker process(es) x {args.turns} turns, "
          f"{args.answer_seconds:g} s answers, {load()}): offering {rate:.1f} deliveries/s", flush=True)
    measured_from = datetime.now(UTC)
    ratios = ab_rounds(floor, gateway, db, args, rate)
    waited = wait_for_backlog(db, 120)
    answers = db.answer_seconds(measured_from)
    print(f"answer latency (accepted -> answered) p50 {percentile(answers, 0.5):.2f} s  "
          f"p99 {percentile(answers, 0.99):.2f} s over {len(answers)} answers; backlog drained "
          f"{waited:.1f} s after the last round ({load()})")
    return ratios


def summary(floor: Side, gateway: Side, db: GatewayDatabase, ratios: list[float]) -> None:
    print(f"floor    {floor.total.line()}")
    print(f"gateway  {gateway.total.line()}  ({load()})")
    if len(gateway.per_replica) > 1:
        for n, sample in enumerate(gateway.per_replica, 1):
            print(f"  replica {n}  {sample.line()}")
    if ratios:
        print(f"p99 ratio gateway/floor: {spread(ratios)}")
        pooled = gateway.total.p99 / floor.total.p99
        print(f"pooled p99 {gateway.total.p99:.2f} ms vs floor {floor.total.p99:.2f} ms ({pooled:.2f}x)")
    stored = db.stored_messages()
    unique, acked = set(stored), gateway.total.acknowledged
    lost, foreign = acked - unique, unique - gateway.sent
    verdict = "OK" if len(stored) == len(unique) and not lost and not foreign else "WRONG"
    late = len(unique - acked)
    print(f"stored {len(stored)} events for {len(gateway.sent)} distinct messages sent, {len(acked)} acknowledged "
          f"({verdict}: {len(stored) - len(unique)} stored twice, {len(lost)} acknowledged but not stored; "
          f"{late} stored though never acknowledged: Slack's retry of these is a duplicate)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=200.0, help="deliveries/s (default 200)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds a side (default 10)")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds per round per side (default 6)")
    parser.add_argument("--timeout", type=float, default=3.0, help="client timeout, s (Slack's: 3)")
    parser.add_argument("--database-url", help="PostgreSQL server for the gateway, e.g. "
                        "postgresql://postgres@127.0.0.1:5432/test (default: SQLite in a temp dir)")
    parser.add_argument("--replicas", type=int, default=1, help="gateways sharing the database (PostgreSQL)")
    parser.add_argument("--durability", choices=("commit", "flush"), default="commit",
                        help="BA_INBOX_DURABILITY: flush makes each acknowledgement wait for the disk")
    parser.add_argument("--workers", type=int, default=1, help="BA_WORKER_PROCESSES per gateway")
    parser.add_argument("--turns", type=int, default=8, help="BA_MAX_CONCURRENT_TURNS per worker")
    parser.add_argument("--answer-seconds", type=float, default=2.0, help="how long the fake model streams an answer")
    parser.add_argument("--probe-rate", type=float, default=0.0,
                        help="also GET /healthz this many times/s during the rounds (e.g. 20): slow probes "
                             "mean the server's loop stalled, slow deliveries with quick probes the database")
    parser.add_argument("--live-threads", type=int, default=16,
                        help="conversations opened before the rounds so the workers are busy (0: start idle)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sustained", action="store_true", help="offer what the workers can answer")
    mode.add_argument("--curve", help="comma-separated rates, one round a side each, e.g. 200,500,1000,2000")
    args = parser.parse_args()
    if args.replicas > 1 and not args.database_url:
        parser.error("--replicas needs --database-url (replicas share a PostgreSQL database)")
    return args


def main() -> None:
    args = parse_args()
    spawn = multiprocessing.get_context("spawn")
    to_fakes, fakes_end = spawn.Pipe()
    fakes = spawn.Process(target=serve_fakes, args=(fakes_end, args.answer_seconds), daemon=True)
    fakes.start()
    slack_url, model_url = to_fakes.recv()
    started: list = []
    with tempfile.TemporaryDirectory() as tmp:
        db = (GatewayDatabase.postgres(args.database_url.replace("postgresql+psycopg://", "postgresql://"))
              if args.database_url else GatewayDatabase.sqlite(Path(tmp)))
        try:
            db.prepare()
            env = gateway_env(db.url, Path(tmp) / "data", slack_url, model_url, args.workers, args.turns,
                              args.durability)
            log = open(Path(tmp) / "gateway.log", "wb")  # closed with the directory
            floors = [start_floor(slack_url) for _ in range(args.replicas)]
            gateways = [start_gateway(env, Path(tmp), log) for _ in range(args.replicas)]
            started = [proc for proc, _ in floors + gateways]
            try:
                for _, port in floors + gateways:
                    wait_ready(port)
            except TimeoutError:
                log.flush()
                print((Path(tmp) / "gateway.log").read_text()[-3000:], file=sys.stderr)
                raise
            floor = Side("floor", [f"http://127.0.0.1:{p}/slack/events" for _, p in floors], [p.pid for p, _ in floors])
            gateway = Side("gateway", [f"http://127.0.0.1:{p}/slack/events" for _, p in gateways],
                           [p.pid for p, _ in gateways])
            for side in (floor, gateway):  # bolt's auth.test, connection pools, database pages
                side.send(realistic_mix(100, f"warm{side.name}"), 50, args.timeout)
            print(f"database {'PostgreSQL' if db.schema else 'SQLite'} (acknowledged on {args.durability}), "
                  f"{args.replicas} replica(s), "
                  f"{args.workers} worker process(es) x {args.turns} turns, {os.cpu_count()} CPUs, {load()}", flush=True)
            ratios: list[float] = []
            make_workers_busy(gateway, db, args)
            if args.curve:
                curve(floor, gateway, db, args)
            elif args.sustained:
                ratios = sustained(floor, gateway, db, args)
            else:
                print(f"offered load: {args.rate:g} deliveries/s, {args.rounds} rounds a side of {args.seconds:g} s",
                      flush=True)
                ratios = ab_rounds(floor, gateway, db, args, args.rate)
            summary(floor, gateway, db, ratios)
            if ratios:
                print(f"median p99 ratio {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})")
        finally:
            for proc in started:
                stop_process(proc)
            to_fakes.send("stop")
            fakes.join(timeout=15)
            db.drop()


if __name__ == "__main__":
    main()
