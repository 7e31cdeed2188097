"""Platform credentials are checked once at start-up: a clear log line and a /readyz entry for a
good token, a refused one and an endpoint that does not answer, without stopping the service.

The gateway runs for real against the fake Slack and Feishu servers (slack-sdk's auth.test,
Feishu's tenant_access_token/internal and bot/v3/info). SQLite only: the checks do not touch
the database.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from adapters.base import CredentialState
from adapters.credentials import CredentialCheck, CredentialsRefused
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.slack_api import FakeSlack
from tests.harness import Gateway, feishu_gateway_settings, gateway_settings, running_gateway
from tests.waiting import scaled


async def credentials_checked(gw: Gateway, platform: str) -> tuple[int, dict[str, Any]]:
    """/readyz once the platform's check has an outcome (status, its credentials entry)."""
    while True:
        status, ready = await gw.get_json("/readyz")
        entry = ready["credentials"][platform]
        if entry["state"] != "checking":
            return status, entry
        await asyncio.sleep(0.05)


async def test_slack_token_is_checked_at_start_up_without_bolts_unused_token_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-good", team_id="T1") as slack:
        # As deployed: the token in the process environment, where slack-bolt reads it too.
        monkeypatch.setenv("SLACK_BOT_TOKEN", slack.bot_token)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, anthropic, slack)
        async with running_gateway(settings) as gw:
            status, entry = await asyncio.wait_for(credentials_checked(gw, "slack"), scaled(10))
    assert status == 200
    assert entry == {"state": "ok", "detail": "bot @ba-agent (UBOT) in workspace Test Workspace (T1)"}
    assert [c.token for c in slack.calls_to("auth.test")][:1] == ["xoxb-good"]
    assert "slack credentials ok: bot @ba-agent (UBOT) in workspace Test Workspace (T1)" in caplog.text
    assert "will be unused" not in caplog.text and "will be ignored" not in caplog.text
    assert "xoxb-good" not in caplog.text


async def test_a_refused_slack_token_is_one_clear_error_line_and_the_service_stays_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-good") as slack:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, anthropic, slack, SLACK_BOT_TOKEN="xoxb-revoked"
        )
        async with running_gateway(settings) as gw:
            status, entry = await asyncio.wait_for(credentials_checked(gw, "slack"), scaled(10))
            assert (await gw.get_json("/healthz"))[0] == 200
    assert status == 200  # reported, not a reason to take the replica out of rotation
    assert entry == {"state": "refused", "detail": "auth.test answered invalid_auth: check SLACK_BOT_TOKEN"}
    [line] = [r for r in caplog.records if "credentials refused" in r.getMessage()]
    assert line.levelno == logging.ERROR
    assert line.getMessage() == "slack credentials refused: auth.test answered invalid_auth: check SLACK_BOT_TOKEN"
    assert "xoxb-revoked" not in caplog.text


async def test_slack_outage_at_start_up_leaves_the_token_unverified_not_refused(tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack() as slack:
        slack.fail_next("auth.test", error="service_unavailable", status=503, retry_after=None)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, anthropic, slack)
        async with running_gateway(settings) as gw:
            status, entry = await asyncio.wait_for(credentials_checked(gw, "slack"), scaled(10))
    assert status == 200
    assert entry["state"] == "unverified" and entry["detail"] == "SlackApiError"


async def test_a_check_that_gets_no_answer_in_time_is_unverified_and_asked_again() -> None:
    answers: list[str] = []

    async def slow_then_refused() -> str:
        answers.append("asked")
        if len(answers) == 1:
            await asyncio.sleep(30)  # an endpoint that hangs
        raise CredentialsRefused("wrong secret")

    check = CredentialCheck("pager", slow_then_refused, timeout_s=0.05, retry_after_s=0.05)
    check.start()
    while check.status.state is CredentialState.CHECKING:
        await asyncio.sleep(0.01)
    assert check.status.state is CredentialState.UNVERIFIED
    assert check.status.detail == "no answer within 0.05 s"
    while check.status.state is CredentialState.UNVERIFIED:
        await asyncio.sleep(0.01)
    assert check.status.state is CredentialState.REFUSED and answers == ["asked", "asked"]
    await check.stop()


@pytest.mark.parametrize("secret", ["good", "wrong"])
async def test_feishu_credentials_are_a_tenant_token_fetched_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, secret: str
) -> None:
    caplog.set_level(logging.INFO)
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            extra = {} if secret == "good" else {"FEISHU_APP_SECRET": "not-the-secret"}
            settings = feishu_gateway_settings(
                f"sqlite:///{tmp_path / 'db.sqlite'}", tmp_path, anthropic, feishu, **extra
            )
            async with running_gateway(settings) as gw:
                status, entry = await asyncio.wait_for(credentials_checked(gw, "feishu"), scaled(10))
    assert status == 200
    if secret == "good":
        assert entry == {"state": "ok", "detail": f"app {feishu.app_id}, bot BA Agent ({feishu.bot_open_id})"}
        assert f"feishu credentials ok: app {feishu.app_id}" in caplog.text
    else:
        assert entry["state"] == "refused"
        assert "code 10014" in entry["detail"] and "FEISHU_APP_SECRET" in entry["detail"]
        assert "feishu credentials refused" in caplog.text
        assert "not-the-secret" not in caplog.text
