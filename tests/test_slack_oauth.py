"""Several Slack workspaces install the app through OAuth ("Add to Slack") and are each
answered with their own bot token; uninstalling stops answering that workspace.

The gateway runs for real (aiohttp, slack-bolt's OAuth flow, slack-sdk's installation store on
the service database); Slack is the local fake, whose authorize page installs into the
workspace the link names and whose tokens each belong to one workspace. SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import requests

from adapters.slack.scopes import bot_scopes
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, app_uninstalled
from tests.harness import SIGNING_SECRET, Gateway, gateway_settings, running_gateway
from tests.serve_process import clean_env, free_port, post_event, start, stop, wait_healthy, wait_workers_ready
from tests.waiting import scaled


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(team_id="T1") as slack:
        yield anthropic, slack


@pytest.fixture
async def gateway(database_url, tmp_path, fakes):
    anthropic, slack = fakes
    settings = gateway_settings(
        database_url, tmp_path, anthropic, slack,
        SLACK_BOT_TOKEN="", SLACK_CLIENT_ID=slack.client_id, SLACK_CLIENT_SECRET=slack.client_secret,
    )  # fmt: skip
    async with running_gateway(settings) as gw:
        slack.redirect_urls = [str(gw.server.make_url("/slack/oauth_redirect"))]
        yield gw


async def install(gw: Gateway, team: str, **authorize: str) -> tuple[int, str]:
    """What an admin of `team` does: open the install page, click "Add to Slack", approve on
    Slack (`authorize`: what else they pick there), land back on the gateway. The browser keeps
    the state cookie the install page set."""
    async with gw.http.get(gw.server.make_url("/slack/install")) as page:
        assert page.status == 200
        html = await page.text()
        cookie = SimpleCookie(page.headers["Set-Cookie"])
    [link] = re.findall(r'href="([^"]*oauth/v2/authorize[^"]*)"', html)
    link = link.replace("&amp;", "&")
    # The link asks for the scopes the shipped manifests grant (SLACK_SCOPES' default).
    assert parse_qs(urlsplit(link).query)["scope"] == [",".join(bot_scopes())]
    params = "".join(f"&{key}={value}" for key, value in {"team": team, **authorize}.items())
    async with aiohttp.ClientSession() as browser:  # Slack's page, then back to the gateway
        async with browser.get(link + params, allow_redirects=False) as approved:
            assert approved.status == 302, await approved.text()
            back = approved.headers["Location"]
        headers = {"Cookie": "; ".join(f"{name}={morsel.value}" for name, morsel in cookie.items())}
        async with browser.get(back, headers=headers, allow_redirects=False) as landed:
            return landed.status, await landed.text()


def answers(slack: FakeSlack, channel: str) -> list[dict[str, Any]]:
    return [m for m in slack.posted(channel=channel) if slack.markdown_of(m)]


async def test_two_workspaces_install_by_oauth_and_each_is_answered_with_its_own_token(gateway, fakes) -> None:
    anthropic, slack = fakes
    assert (await install(gateway, "T1"))[0] == 200
    assert (await install(gateway, "T2"))[0] == 200
    assert [i["team"]["id"] for i in slack.installs] == ["T1", "T2"]
    t1, t2 = slack.token_of("T1"), slack.token_of("T2")
    assert t1 != t2

    anthropic.script(Reply([text("GMV for the first workspace.")]), Reply([text("GMV for the second workspace.")]))
    one = app_mention("<@UBOTT1> GMV?", "U1", "C1", ts="1700000001.000100", team="T1", bot_user_id="UBOTT1")
    two = app_mention("<@UBOTT2> GMV?", "U9", "C2", ts="1700000002.000100", team="T2", bot_user_id="UBOTT2")
    for event in (one, two, one):  # the first one redelivered
        assert (await gateway.post_event(event)).status == 200
    await gateway.settled()

    [first] = answers(slack, "C1")
    [second] = answers(slack, "C2")
    assert first["thread_ts"] == "1700000001.000100" and second["thread_ts"] == "1700000002.000100"
    assert len(anthropic.requests) == 2
    # Every call about a workspace's conversation (reactions, the streamed answer, its
    # metadata) went with that workspace's token.
    used = {(call.params.get("channel"), call.token) for call in slack.calls if call.params.get("channel")}
    assert used == {("C1", t1), ("C2", t2)}
    assert {call.method for call in slack.calls_with(t2)} >= {"reactions.add", "chat.startStream"}
    # The bot's own mention was recognised per workspace: the question reached the model bare.
    assert anthropic.requests[0].body["messages"][0]["content"][0]["text"].endswith("GMV?")
    assert "<@UBOT" not in str(anthropic.requests[0].body["messages"])


async def test_an_installed_workspaces_mention_is_stored_and_answered_while_auth_test_fails(gateway, fakes) -> None:
    """Who the bot is comes from the stored install, not from Slack on each event: while Slack's
    auth.test fails, a mention is still acknowledged, stored and answered once."""
    anthropic, slack = fakes
    assert (await install(gateway, "T1"))[0] == 200
    slack.fail_next("auth.test", error="service_unavailable", status=503, retry_after=None, times=1000)
    anthropic.script(Reply([text("GMV is up.")]))
    event = app_mention("<@UBOTT1> GMV?", "U1", "C1", ts="1700000001.000100", team="T1", bot_user_id="UBOTT1")
    assert (await gateway.post_event(event)).status == 200
    assert await gateway.stored_events() == 1
    await gateway.settled()
    [answer] = answers(slack, "C1")
    assert answer["thread_ts"] == "1700000001.000100" and slack.markdown_of(answer) == "GMV is up."
    assert slack.calls_with(slack.token_of("T1"), "chat.startStream")


async def test_an_uninstalled_workspace_is_no_longer_answered(gateway, fakes) -> None:
    anthropic, slack = fakes
    await install(gateway, "T1")
    await install(gateway, "T2")
    slack.uninstall("T2")
    assert (await gateway.post_event(app_uninstalled("T2"))).status == 200

    anthropic.script(Reply([text("Still here for the first workspace.")]), Reply([text("Must not happen.")]))
    gone = app_mention("<@UBOTT2> hello?", "U9", "C2", ts="1700000003.000100", team="T2", bot_user_id="UBOTT2")
    kept = app_mention("<@UBOTT1> hello?", "U1", "C1", ts="1700000004.000100", team="T1", bot_user_id="UBOTT1")
    await gateway.post_event(gone)
    await gateway.post_event(kept)
    await gateway.settled()
    assert answers(slack, "C2") == [] and len(answers(slack, "C1")) == 1
    assert len(anthropic.requests) == 1
    assert slack.calls_with(slack.token_of("T1"), "chat.startStream")
    # Nothing was even stored for the uninstalled workspace.
    assert await gateway.stored_events() == 1


async def test_an_org_wide_install_answers_every_workspace_of_the_org_with_the_orgs_token(gateway, fakes) -> None:
    anthropic, slack = fakes
    assert (await install(gateway, "T5", enterprise="E1", org_wide="1"))[0] == 200
    assert slack.installs[0]["is_enterprise_install"] is True and slack.installs[0]["team"] is None
    org_token = slack.token_of("E1")
    anthropic.script(Reply([text("Answer in the first workspace.")]), Reply([text("Answer in the second.")]))
    for team, channel, ts in (("T5", "C5", "1700000005.000100"), ("T6", "C6", "1700000006.000100")):
        event = app_mention("<@UBOTE1> GMV?", "U1", channel, ts=ts, team=team, bot_user_id="UBOTE1",
                            enterprise="E1", org_wide=True)  # fmt: skip
        assert (await gateway.post_event(event)).status == 200
    await gateway.settled()
    assert len(answers(slack, "C5")) == 1 and len(answers(slack, "C6")) == 1
    assert {call.token for call in slack.calls if call.params.get("channel")} == {org_token}


async def test_an_install_with_a_state_the_gateway_never_issued_is_refused(gateway, fakes) -> None:
    _anthropic, slack = fakes
    status, _page = await install(gateway, "T1")
    assert status == 200
    # Straight to the redirect with a code but a state the gateway never issued.
    async with gateway.http.get(
        gateway.server.make_url("/slack/oauth_redirect"), params={"code": "abc", "state": "forged"}
    ) as landed:
        assert landed.status in (400, 401)
    assert len(slack.installs) == 1


async def test_install_routes_are_off_with_a_single_bot_token(database_url, tmp_path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack() as slack:
        async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
            async with gw.http.get(gw.server.make_url("/slack/install")) as page:
                assert page.status == 404
                assert "SLACK_CLIENT_ID" in (await page.json())["error"]


def test_worker_processes_answer_each_installed_workspace_with_its_own_token(database_url: str, tmp_path: Path) -> None:
    """As deployed: `ba-agent serve` accepts, its worker process answers; the install's redirect
    URL is the public one set in SLACK_REDIRECT_URI."""
    port = free_port()
    redirect = f"http://127.0.0.1:{port}/slack/oauth_redirect"
    with FakeAnthropic.in_thread() as anthropic, FakeSlack.in_thread(team_id="T1") as slack:
        slack.redirect_urls = ["https://elsewhere.example.com/slack/oauth_redirect", redirect]
        anthropic.script(Reply([text("Answer one.")]), Reply([text("Answer two.")]))
        env = clean_env(
            tmp_path, DATABASE_URL=database_url, ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_CLIENT_ID=slack.client_id, SLACK_CLIENT_SECRET=slack.client_secret, SLACK_REDIRECT_URI=redirect,
            SLACK_SIGNING_SECRET=SIGNING_SECRET, SLACK_API_URL=slack.base_url, BA_POLL_INTERVAL="0.2",
        )  # fmt: skip
        proc = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            for team in ("T1", "T2"):
                page = requests.get(f"http://127.0.0.1:{port}/slack/install", timeout=scaled(5))
                [link] = re.findall(r'href="([^"]*oauth/v2/authorize[^"]*)"', page.text)
                approved = requests.get(f"{link.replace('&amp;', '&')}&team={team}", allow_redirects=False, timeout=scaled(5))
                assert approved.headers["Location"].startswith(redirect + "?")
                # The browser sends back the state cookie the install page set (Secure: browsers
                # send it to http://127.0.0.1 too, requests does not).
                cookie = "; ".join(f"{name}={value}" for name, value in page.cookies.items())
                landed = requests.get(
                    approved.headers["Location"], headers={"Cookie": cookie}, allow_redirects=False, timeout=scaled(5)
                )
                assert landed.status_code == 200, landed.text
            for team, channel, ts in (("T1", "C1", "1700000001.000100"), ("T2", "C2", "1700000002.000100")):
                bot = f"UBOT{team}"
                assert post_event(port, app_mention(f"<@{bot}> GMV?", "U1", channel, ts=ts, team=team, bot_user_id=bot)) == 200
            slack.wait_for_sync("chat.stopStream", count=2, timeout=30)
        finally:
            out = stop(proc)
        used = {(call.params.get("channel"), call.token) for call in slack.calls if call.params.get("channel")}
        assert used == {("C1", slack.token_of("T1")), ("C2", slack.token_of("T2"))}
        assert len(anthropic.requests) == 2
        assert slack.token_of("T1") not in out and slack.client_secret not in out


async def test_install_links_that_expired_unused_are_forgotten(gateway, fakes) -> None:
    from sqlalchemy import text as sql

    async with gateway.runtime.engine.begin() as conn:  # a link handed out an hour ago, never used
        await conn.execute(sql("INSERT INTO oauth_states (state, expire_at) VALUES ('old', :at)"),
                           {"at": datetime.now(UTC).replace(tzinfo=None) - timedelta(minutes=50)})  # fmt: skip
    assert (await install(gateway, "T1"))[0] == 200
    async with gateway.runtime.engine.connect() as conn:
        assert (await conn.execute(sql("SELECT state FROM oauth_states"))).all() == []
