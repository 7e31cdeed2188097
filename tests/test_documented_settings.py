"""Settings the README documents by variable name are read under that name: a misspelt name in
the README (or a renamed field) would leave an operator's setting silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.feishu.config import FeishuConfig
from agent_core.config import AgentConfig
from agent_core.store.db import create_engine, session_factory
from agent_core.store.threads import ThreadStore

ROOT = Path(__file__).resolve().parent.parent

FEISHU = [
    ("FEISHU_REPLY_IN_THREAD", "false", "reply_in_thread", False),
    ("FEISHU_RESPOND_TO_AT_ALL", "true", "respond_to_at_all", True),
    ("FEISHU_MAX_EVENT_AGE_S", "600", "max_event_age_s", 600),
    ("FEISHU_TIMESTAMP_WINDOW_S", "120", "timestamp_window_s", 120),
    ("FEISHU_STREAM_UPDATE_INTERVAL_MS", "500", "stream_update_interval_ms", 500),
    ("FEISHU_SENDS_PER_SECOND_PER_CHAT", "2.5", "sends_per_second_per_chat", 2.5),
    ("FEISHU_WS_SILENCE_TIMEOUT_S", "90", "ws_silence_timeout_s", 90.0),
]


@pytest.mark.parametrize(("variable", "value", "field", "expected"), FEISHU, ids=[v for v, *_ in FEISHU])
def test_feishu_tuning_variables_are_read_under_their_documented_names(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, expected: object
) -> None:
    assert f"`{variable}`" in (ROOT / "README.md").read_text()
    assert getattr(FeishuConfig(_env_file=None), field) != expected  # the default differs
    monkeypatch.setenv(variable, value)
    assert getattr(FeishuConfig(_env_file=None), field) == expected


async def test_ba_model_timeout_reaches_the_model_client(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from agent_core.agent import build_agent

    monkeypatch.setenv("BA_MODEL_TIMEOUT", "42")
    config = AgentConfig(model="m", data_dir=tmp_path, api_key="x")
    engine = create_engine(f"sqlite:///{tmp_path / 'a.db'}")
    agent = build_agent(config, ThreadStore(session_factory(engine)), session_factory(engine))
    try:
        assert agent.model.timeout_s == 42
    finally:
        await agent.aclose()
        await engine.dispose()


def test_ba_public_host_names_the_proxy_site() -> None:
    """compose passes BA_PUBLIC_HOST to Caddy, whose site address it is (plain HTTP without it)."""
    compose = (ROOT / "deploy" / "compose.yaml").read_text()
    caddyfile = (ROOT / "deploy" / "caddy" / "Caddyfile").read_text()
    assert "BA_PUBLIC_HOST: ${BA_PUBLIC_HOST:-}" in compose
    assert any(line.startswith("{$BA_PUBLIC_HOST::80} {") for line in caddyfile.splitlines())
