"""Platforms are plugins: the gateway serves one it has never heard of, answers 503 on the routes
of one that is not configured, and its code (and the agent core's) names no platform."""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from adapters.base import (
    ConnectionState,
    ConnectionStatus,
    CredentialStatus,
    GatewayServices,
    Handler,
    Platform,
    PlatformSettings,
    Route,
)
from adapters.registry import PLATFORMS
from agent_core.messages import Attachment, InboundMessage, OutboundReply, ThreadKey
from gateway.config import ConfigError, load_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.harness import Gateway, running_gateway

ROOT = Path(__file__).resolve().parent.parent


# --- a platform only this test knows ----------------------------------------------------------


class PagerSettings(PlatformSettings):
    model_config = SettingsConfigDict(env_prefix="PAGER_")

    token: SecretStr | None = None
    channel_prefix: str = Field("room-", pattern=r"^[a-z]+-$")

    @property
    def configured(self) -> bool:
        return self.token is not None

    def missing(self) -> list[str]:
        return [] if self.configured else ["PAGER_TOKEN"]

    def describe(self) -> str:
        return "webhook" if self.configured else "off"


class PagerResponder:
    platform = "pager"

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str]] = []  # (channel, text)

    async def show_progress(self, msg: InboundMessage) -> None:
        return None

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        return None

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> None:
        return None

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        self.delivered.append((msg.channel, reply.text))

    async def clear_progress(self, msg: InboundMessage) -> None:
        return None

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        return []

    async def fetch_attachment(self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int) -> Path:
        raise AssertionError("pager messages carry no files")

    def mention(self, user: str) -> str:
        return f"@{user}"

    async def user_locale(self, user: str, workspace: str) -> str | None:
        return None

    def dm_address(self, user: str) -> str | None:
        return None

    async def thread_context(self, msg: InboundMessage) -> None:
        return None

    async def close(self) -> None:
        return None


class PagerAdapter:
    def __init__(self, settings: PagerSettings, services: GatewayServices) -> None:
        self._settings = settings
        self._services = services
        self.responder = PagerResponder()
        self.started = False

    def handler(self, route: Route) -> Handler:
        return self._receive

    async def _receive(self, request: web.Request) -> web.Response:
        assert self._settings.token is not None
        if request.headers.get("Authorization") != f"Bearer {self._settings.token.get_secret_value()}":
            return web.json_response({"ok": False}, status=401)
        body = await request.json()
        channel = self._settings.channel_prefix + body["room"]
        msg = InboundMessage(
            platform="pager",
            event_id=body["id"],
            message_id=body["id"],
            workspace="w",
            channel=channel,
            thread=ThreadKey(platform="pager", workspace="w", channel=channel, root=body["id"]),
            reply_in_thread=body["id"],
            user=body["user"],
            text=body["text"],
        )
        outcome = await self._services.accept(msg)
        return web.json_response({"ok": True, "outcome": outcome.value})

    async def start(self) -> None:
        self.started = True

    def status(self) -> ConnectionStatus | None:
        return ConnectionStatus(state=ConnectionState.CONNECTED if self.started else ConnectionState.STOPPED)

    def credentials(self) -> CredentialStatus | None:
        return None

    async def stop(self) -> None:
        self.started = False


class PagerPlatform(Platform[PagerSettings]):
    name = "pager"
    title = "Pager"
    settings_class = PagerSettings
    setup_hint = "PAGER_TOKEN"
    routes = (Route("POST", "/pager/events"),)

    def build(self, services: GatewayServices) -> PagerAdapter:
        return PagerAdapter(self.settings, services)


def settings_values(tmp_path: Path, anthropic: FakeAnthropic) -> dict[str, Any]:
    return {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ba.db'}",
        "BA_DATA_DIR": str(tmp_path / "data"),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "BA_POLL_INTERVAL": 0.2,
        "BA_WORKER_PROCESSES": 0,
    }


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as fake:
        yield fake


async def post(gw: Gateway, path: str, body: dict[str, Any], **headers: str) -> tuple[int, Any]:
    async with gw.http.post(gw.server.make_url(path), json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_a_plugin_no_gateway_code_knows_is_configured_served_and_answered(
    anthropic: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PAGER_TOKEN", "pager-secret")  # read through the plugin's env_prefix
    settings = load_settings(
        _env_file=None, platforms=(*PLATFORMS, PagerPlatform), PAGER_CHANNEL_PREFIX="ops-",
        **settings_values(tmp_path, anthropic),
    )
    anthropic.script(Reply([text("Orders are flat this week.")]))
    caplog.set_level(logging.INFO, logger="gateway.service.app")
    async with running_gateway(settings) as gw:
        question = {"id": "p1", "room": "42", "user": "ana", "text": "how are orders?"}
        assert await post(gw, "/pager/events", question, Authorization="Bearer wrong") == (401, {"ok": False})
        assert await post(gw, "/pager/events", question, Authorization="Bearer pager-secret") == (
            200, {"ok": True, "outcome": "accepted"}
        )
        await gw.settled()
        responder = gw.runtime.responders["pager"]
        assert isinstance(responder, PagerResponder)
        assert responder.delivered == [("ops-42", "Orders are flat this week.")]
        status, ready = await gw.get_json("/readyz")
        assert status == 200 and ready["connections"]["pager"]["state"] == "connected"
    [startup] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("platforms:")]
    assert "pager (webhook)" in startup and "console (ba-agent chat)" in startup
    assert "pager-secret" not in caplog.text


async def test_unconfigured_platforms_answer_503_saying_what_to_set(
    anthropic: FakeAnthropic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("PAGER_TOKEN", raising=False)
    settings = load_settings(_env_file=None, platforms=(*PLATFORMS, PagerPlatform), **settings_values(tmp_path, anthropic))
    caplog.set_level(logging.INFO, logger="gateway.service.app")
    async with running_gateway(settings) as gw:
        answers = [await post(gw, f"/{name}/events", {}) for name in ("slack", "feishu", "pager")]
        status, ready = await gw.get_json("/readyz")
    assert answers == [
        (503, {"ok": False, "error": "Slack is not configured: set SLACK_BOT_TOKEN (or SLACK_CLIENT_ID and "
                                     "SLACK_CLIENT_SECRET) and SLACK_SIGNING_SECRET (or SLACK_MODE=socket and "
                                     "SLACK_APP_TOKEN)"}),
        (503, {"ok": False, "error": "Feishu is not configured: set FEISHU_APP_ID and FEISHU_APP_SECRET"}),
        (503, {"ok": False, "error": "Pager is not configured: set PAGER_TOKEN"}),
    ]
    assert status == 200 and ready["connections"] == {}
    [startup] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("platforms:")]
    assert startup.startswith("platforms: slack (off), feishu (off), console (ba-agent chat), pager (off);")
    assert startup.endswith(
        "missing: SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, FEISHU_APP_ID/FEISHU_APP_SECRET, PAGER_TOKEN"
    )


def test_an_invalid_plugin_setting_is_named_by_its_variable() -> None:
    with pytest.raises(ConfigError, match="^invalid configuration: BA_PORT: .*; PAGER_CHANNEL_PREFIX: String should match"):
        load_settings(_env_file=None, platforms=(PagerPlatform,), PAGER_CHANNEL_PREFIX="Ops", BA_PORT="eighty")


# --- no platform names in the gateway or the agent core ----------------------------------------

PLATFORM_NAMES = re.compile(r"slack|feishu|lark", re.IGNORECASE)


def _exempt_strings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings or argparse help texts."""
    exempt: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        if isinstance(node, ast.keyword) and node.arg == "help":
            exempt |= {id(n) for n in ast.walk(node.value) if isinstance(n, ast.Constant)}
    return exempt


def platform_names_in_code(path: Path) -> list[str]:
    """Identifiers, imports and strings (docstrings and help texts aside) naming a platform.
    Comments are not in the syntax tree."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = _exempt_strings(tree)
    found = []
    for node in ast.walk(tree):
        words: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in exempt:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, ast.alias):
            words.append(node.name)
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words.append(node.name)
        elif isinstance(node, ast.arg):
            words.append(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            words.append(node.arg)
        found += [f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}: {w!r}" for w in words if PLATFORM_NAMES.search(w)]
    return found


def test_the_scan_sees_code_but_not_comments_docstrings_or_help() -> None:
    sample = ROOT / "tests" / "fakes" / "slack_events.py"  # a file full of platform names
    assert platform_names_in_code(sample)


def test_gateway_and_agent_core_code_name_no_platform() -> None:
    sources = sorted((ROOT / "gateway").rglob("*.py")) + sorted((ROOT / "agent_core").rglob("*.py"))
    assert len(sources) > 20
    assert [hit for path in sources for hit in platform_names_in_code(path)] == []
