"""Ingest benchmark: how fast a signed Slack event is acknowledged, against a bare floor.

Each server runs as its own process on loopback and is measured in the same run with the same
offered load (open loop: requests are sent on a fixed schedule, whether or not earlier ones
have been answered):

- a bare slack-bolt AsyncApp with a no-op listener on aiohttp — the floor, measured first,
  with nothing else running;
- the gateway (`ba-agent serve`, SQLite, full path: bolt verification, parsing, the inbox
  commit before the 200, and its worker process answering in the background through a fake
  model that streams each answer over about two seconds, as a real model would).

The fake Slack and Anthropic servers run in a process of their own, so the load generator
shares its interpreter with nothing, at the lowest CPU priority: in production those services
run on other machines, so here they take only CPU nothing else wants. Prints ack latency
p50/p99 and errors for both, and the ratio of the p99s. Target: gateway p99 within 2x of the
floor at 200 events/s, zero errors. Each server gets 30 s (6,000 events): a p99 over 2,000
events rests on its 20 slowest, and one scheduling hiccup of the machine moves it.

    .venv/bin/python bench/ingest.py [--rate 200] [--seconds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text  # noqa: E402
from tests.fakes.slack_api import FakeSlack  # noqa: E402
from tests.fakes.slack_events import app_mention, signed_request  # noqa: E402

SECRET = "bench-signing-secret"

BARE_BOLT = """
import sys
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_sdk.web.async_client import AsyncWebClient

client = AsyncWebClient(token="xoxb-bench", base_url=sys.argv[2])
app = AsyncApp(client=client, signing_secret=sys.argv[3], process_before_response=True)

@app.event("app_mention")
async def noop():
    pass

async def handle(request):
    return await to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

async def healthz(_request):
    return web.json_response({"ok": True})

web_app = web.Application()
web_app.router.add_post("/slack/events", handle)
web_app.router.add_get("/healthz", healthz)
web.run_app(web_app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, timeout: float = 60) -> None:
    """Wait until the server answers /healthz and, if it has worker processes, all are answering."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                pass
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                workers = json.loads(resp.read()).get("workers")
            if workers is None or workers["ready"] == workers["configured"]:
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # the bare app has no /readyz
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"server on {port} did not get ready")


async def offered_load(port: int, rate: float, seconds: float, tag: str) -> tuple[list[float], int]:
    """Send signed events at `rate`/s for `seconds`; return ack latencies (ms) and errors."""
    url = f"http://127.0.0.1:{port}/slack/events"
    total = int(rate * seconds)
    requests = []
    for i in range(total):
        payload = app_mention(
            "<@UBOT> how are sales?", "U1", f"C{i % 50}", ts=f"1700{i:06d}.000100", event_id=f"Ev{tag}{i}"
        )
        requests.append(signed_request(payload, SECRET))
    latencies: list[float] = []
    errors = 0

    async def send(session: aiohttp.ClientSession, body: bytes, headers: dict[str, str]) -> None:
        nonlocal errors
        started = time.perf_counter()
        try:
            async with session.post(url, data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    errors += 1
                    return
        except aiohttp.ClientError:
            errors += 1
            return
        latencies.append((time.perf_counter() - started) * 1000)

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        tasks = []
        for i, (body, headers) in enumerate(requests):
            delay = t0 + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(session, body, headers)))
        await asyncio.gather(*tasks)
    return latencies, errors


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=1000)[int(q * 1000) - 1] if len(values) > 1 else values[0]


def report(name: str, latencies: list[float], errors: int) -> float:
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(f"{name:8s} n={len(latencies):5d}  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  errors {errors}")
    return p99


def serve_fakes(conn: Connection) -> None:
    """Child process: the fake Slack and Anthropic servers, until the parent says stop."""
    os.nice(19)  # stand-ins for remote services (see the module docstring)
    with FakeSlack.in_thread(bot_token="xoxb-bench", bot_user_id="UBOT", team_id="T1") as slack, \
            FakeAnthropic.in_thread() as model:
        model.respond_with(lambda _request: Reply([text("Sales are up 4% week over week. " * 8)], event_delay=0.15))
        conn.send((slack.base_url, model.base_url))
        conn.recv()


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        print(f"warning: {proc.args[1]} did not stop within 15 s of SIGTERM", file=sys.stderr)
        proc.kill()


def measure(port: int, rate: float, seconds: float, tag: str) -> tuple[list[float], int]:
    wait_ready(port)
    asyncio.run(offered_load(port, 50, 1, f"warm{tag}"))  # bolt's auth.test, pools, SQLite pages
    return asyncio.run(offered_load(port, rate, seconds, tag))


def fresh_postgres_schema(url: str) -> tuple[str, str]:
    """A new schema for this run; returns it and the URL whose search_path selects it."""
    import uuid

    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return schema, f"{url}?options=-csearch_path%3D{schema}"


def drop_postgres_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--database-url", help="the gateway's DATABASE_URL (default: SQLite in a temp dir), "
                        "e.g. postgresql://postgres@127.0.0.1:5432/test; a fresh schema is used and dropped")
    args = parser.parse_args()

    spawn = multiprocessing.get_context("spawn")
    to_fakes, fakes_end = spawn.Pipe()
    fakes = spawn.Process(target=serve_fakes, args=(fakes_end,), daemon=True)
    fakes.start()
    slack_url, model_url = to_fakes.recv()
    print(f"offered load: {args.rate:g} events/s for {args.seconds:g} s per server, loopback")
    with tempfile.TemporaryDirectory() as tmp:
        bare_port, gateway_port = free_port(), free_port()
        bare = subprocess.Popen([sys.executable, "-c", BARE_BOLT, str(bare_port), slack_url, SECRET],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            bare_lat, bare_err = measure(bare_port, args.rate, args.seconds, "b")
        finally:
            stop_process(bare)

        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("BA_", "SLACK_", "ANTHROPIC_", "DATABASE_URL"))
        }
        env.update(
            BA_DATA_DIR=str(Path(tmp) / "data"),
            SLACK_BOT_TOKEN="xoxb-bench",
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=slack_url,
            ANTHROPIC_API_KEY="bench",
            ANTHROPIC_BASE_URL=model_url,
            BA_MAX_CONCURRENT_TURNS=os.environ.get("BENCH_TURNS", "8"),
        )
        schema = None
        if args.database_url:
            schema, env["DATABASE_URL"] = fresh_postgres_schema(args.database_url)
        ba_agent = str(Path(sys.executable).parent / "ba-agent")
        # The log goes into a pipe, as under a container runtime or systemd; `cat` stores it.
        gateway_log = open(Path(tmp) / "gateway.log", "w")  # noqa: SIM115 - closed with the dir
        log_sink = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=gateway_log)
        gateway = subprocess.Popen([ba_agent, "serve", "--port", str(gateway_port)], env=env, cwd=tmp,
                                   stdout=log_sink.stdin, stderr=subprocess.STDOUT)
        log_sink.stdin.close()
        try:
            gw_lat, gw_err = measure(gateway_port, args.rate, args.seconds, "g")
        finally:
            stop_process(gateway)
            to_fakes.send("stop")
            fakes.join(timeout=15)
            if schema is not None:
                drop_postgres_schema(args.database_url, schema)
    floor = report("floor", bare_lat, bare_err)
    p99 = report("gateway", gw_lat, gw_err)
    print(f"p99 {p99:.2f} ms vs floor {floor:.2f} ms ({p99 / floor:.2f}x), {gw_err + bare_err} errors")


if __name__ == "__main__":
    main()
