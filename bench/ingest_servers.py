"""The processes the ingest benchmark measures and talks to, and the gateway's database.

- the fake Slack and Anthropic servers, in a process of their own at normal priority (they
  stand in for remote services, but a fake starved of CPU would stall the workers' answers
  and so shape the very load being measured);
- the floor: a bare slack-bolt AsyncApp on aiohttp whose listeners do nothing;
- the gateway: `ba-agent serve` with its worker processes, on SQLite or PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO

from bench.ingest_mix import SECRET, TEAM, thread_roots

BARE_BOLT = """
import sys
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_sdk.web.async_client import AsyncWebClient

client = AsyncWebClient(token="xoxb-bench", base_url=sys.argv[2])
app = AsyncApp(client=client, signing_secret=sys.argv[3], process_before_response=True)

@app.event("app_mention")
async def on_mention():
    pass

@app.event("message")
async def on_message():
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


def wait_ready(port: int, timeout: float = 90) -> None:
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


def serve_fakes(conn: Connection, answer_seconds: float) -> None:
    """Child process: the fake Slack and Anthropic servers, until the parent says stop.

    Each answer streams in 12 parts over `answer_seconds`, as a model's would."""
    from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
    from tests.fakes.slack_api import FakeSlack

    with FakeSlack.in_thread(bot_token="xoxb-bench", bot_user_id="UBOT", team_id=TEAM) as slack, \
            FakeAnthropic.in_thread() as model:
        answer = [text("Sales are up 4% week over week. " * 8)]
        model.respond_with(lambda _request: Reply(answer, event_delay=answer_seconds / 12))
        conn.send((slack.base_url, model.base_url))
        conn.recv()


def stop_process(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        print(f"warning: {proc.args!r} did not stop within 20 s of SIGTERM", file=sys.stderr)
        proc.kill()


def start_floor(slack_url: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", BARE_BOLT, str(port), slack_url, SECRET],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, port


def start_gateway(env: dict[str, str], cwd: Path, log: IO[bytes]) -> tuple[subprocess.Popen, int]:
    """`ba-agent serve`; its log goes into a pipe, as under a container runtime or systemd."""
    port = free_port()
    ba_agent = str(Path(sys.executable).parent / "ba-agent")
    sink = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=log)
    proc = subprocess.Popen([ba_agent, "serve", "--port", str(port)], env=env, cwd=cwd,
                            stdout=sink.stdin, stderr=subprocess.STDOUT)
    assert sink.stdin is not None
    sink.stdin.close()
    return proc, port


def gateway_env(database_url: str, data_dir: Path, slack_url: str, model_url: str, workers: int, turns: int,
                durability: str = "commit") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BA_", "SLACK_", "ANTHROPIC_", "DATABASE_URL"))}
    env.update(
        DATABASE_URL=database_url,
        BA_DATA_DIR=str(data_dir),
        SLACK_BOT_TOKEN="xoxb-bench",
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=slack_url,
        ANTHROPIC_API_KEY="bench",
        ANTHROPIC_BASE_URL=model_url,
        BA_WORKER_PROCESSES=str(workers),
        BA_MAX_CONCURRENT_TURNS=str(turns),
        BA_INBOX_DURABILITY=durability,
    )
    return env


@dataclass
class GatewayDatabase:
    """The gateway's database as the benchmark sees it: created, seeded, inspected, dropped."""

    url: str
    admin_url: str | None = None  # PostgreSQL: the server, without the run's schema
    schema: str | None = None

    @classmethod
    def sqlite(cls, directory: Path) -> GatewayDatabase:
        return cls(f"sqlite:///{directory / 'bench.db'}")

    @classmethod
    def postgres(cls, admin_url: str) -> GatewayDatabase:
        """A fresh schema for this run, selected through the URL's search_path."""
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        return cls(_with_option(admin_url, f"-csearch_path={schema}"), admin_url, schema)

    def prepare(self) -> None:
        """Migrate, and open the bot threads the follow-ups continue."""
        from adapters.slack.events import thread_key_for
        from agent_core.store.db import create_engine, session_factory
        from agent_core.store.threads import ThreadStore
        from gateway.migrate import upgrade

        upgrade(self.url)

        async def seed() -> None:
            engine = create_engine(self.url)
            store = ThreadStore(session_factory(engine))
            for channel, root in thread_roots():
                await store.open(thread_key_for(TEAM, channel, root))
            await engine.dispose()

        asyncio.run(seed())

    def drop(self) -> None:
        if self.schema is not None and self.admin_url is not None:
            import psycopg

            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {self.schema} CASCADE")

    def query(self, sql: str) -> list[tuple]:
        if self.schema is None:
            database = self.url.removeprefix("sqlite:///")
            with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10) as conn:
                return conn.execute(sql).fetchall()
        import psycopg

        with psycopg.connect(_with_option(self.admin_url or "", f"-csearch_path={self.schema}"), autocommit=True) as conn:
            return conn.execute(sql).fetchall()  # type: ignore[arg-type]

    def open_events(self) -> int:
        return int(self.query("SELECT count(*) FROM inbound_events WHERE status IN ('pending', 'processing')")[0][0])

    def turns_in_progress(self) -> int:
        return int(self.query("SELECT count(*) FROM inbound_events WHERE status = 'processing'")[0][0])

    def stored_messages(self) -> list[str]:
        """The dedupe keys of every stored event."""
        return [row[0] for row in self.query("SELECT dedupe_key FROM inbound_events")]

    def answer_seconds(self, created_after: datetime) -> list[float]:
        """Accepted → answered, for every event answered that was accepted after `created_after` (UTC)."""
        rows = self.query("SELECT created_at, updated_at FROM inbound_events WHERE status = 'done'")
        out = []
        for created, updated in rows:
            created_at, updated_at = _utc(created), _utc(updated)
            if created_at >= created_after:
                out.append((updated_at - created_at).total_seconds())
        return out


def _with_option(url: str, option: str) -> str:
    """`url` with `option` added to its libpq `options` (any the caller gave are kept)."""
    from urllib.parse import parse_qsl, quote, urlencode, urlsplit

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query['options']} {option}" if "options" in query else option
    return parts._replace(query=urlencode(query, quote_via=quote)).geturl()


def _utc(value: object) -> datetime:
    from datetime import UTC

    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
