"""Running the real gateway app against the fakes, for end-to-end tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from sqlalchemy import func, select

from gateway.config import Settings, load_settings
from gateway.service.app import RUNNER_OPTIONS, RUNTIME, create_app
from gateway.service.runtime import Runtime
from gateway.tables import InboundEventRow
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import signed_request
from tests.waiting import Deadline

SIGNING_SECRET = "test-signing-secret"


def gateway_settings(
    database_url: str, data_dir: Path, anthropic: FakeAnthropic, slack: FakeSlack, **extra: Any
) -> Settings:
    values = {
        "DATABASE_URL": database_url,
        "BA_DATA_DIR": str(data_dir),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.base_url,
        "BA_POLL_INTERVAL": 0.2,
        "BA_WORKER_PROCESSES": 0,  # answered in the test process, where tests can look inside
        "BA_MODEL_RETRIES": 2,
        **extra,
    }
    return load_settings(_env_file=None, **values)


def feishu_gateway_settings(
    database_url: str, data_dir: Path, anthropic: FakeAnthropic, feishu: FakeFeishu, **extra: Any
) -> Settings:
    """Settings of a gateway answering Feishu webhooks (encrypted and token-verified) in-process."""
    from tests.fakes.feishu_events import ENCRYPT_KEY, VERIFICATION_TOKEN

    values = {
        "DATABASE_URL": database_url,
        "BA_DATA_DIR": str(data_dir),
        "ANTHROPIC_API_KEY": "test",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "FEISHU_APP_ID": feishu.app_id,
        "FEISHU_APP_SECRET": feishu.app_secret,
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN,
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_DOMAIN": feishu.domain,
        "BA_POLL_INTERVAL": 0.2,
        "BA_WORKER_PROCESSES": 0,
        **extra,
    }
    return load_settings(_env_file=None, **values)


@dataclass
class Gateway:
    server: TestServer
    http: aiohttp.ClientSession

    @property
    def runtime(self) -> Runtime:
        return self.server.app[RUNTIME]

    async def post_event(
        self, payload: dict[str, Any], *, secret: str = SIGNING_SECRET, timestamp: int | None = None, **sign_args: Any
    ) -> aiohttp.ClientResponse:
        body, headers = signed_request(payload, secret, timestamp, **sign_args)
        async with self.http.post(self.server.make_url("/slack/events"), data=body, headers=headers) as resp:
            await resp.read()
            return resp

    async def get_json(self, path: str) -> tuple[int, Any]:
        async with self.http.get(self.server.make_url(path)) as resp:
            return resp.status, json.loads(await resp.text())

    async def settled(self, timeout: float = 15.0) -> None:
        """Wait until every accepted event is answered (or given up on)."""
        deadline = Deadline(timeout)
        while True:
            async with self.runtime.engine.connect() as conn:
                open_events = (
                    await conn.execute(
                        select(func.count())
                        .select_from(InboundEventRow)
                        .where(InboundEventRow.status.in_(["pending", "processing"]))
                    )
                ).scalar_one()
            if open_events == 0:
                return
            if deadline.passed():
                raise TimeoutError(f"{open_events} events still open after {deadline.elapsed():.1f}s")
            await asyncio.sleep(0.05)

    async def stored_events(self) -> int:
        async with self.runtime.engine.connect() as conn:
            return (await conn.execute(select(func.count()).select_from(InboundEventRow))).scalar_one()


@asynccontextmanager
async def running_gateway(settings: Settings) -> AsyncIterator[Gateway]:
    server = TestServer(create_app(settings))
    await server.start_server(**RUNNER_OPTIONS)
    try:
        async with aiohttp.ClientSession() as http:
            yield Gateway(server, http)
    finally:
        await server.close()
