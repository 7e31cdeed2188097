"""Slack over Socket Mode, through the real slack_sdk / slack_bolt against FakeSlack's websocket.

The connection tests use a recording inbox; the last test runs the real gateway (inbox,
dispatcher, replies) with its Slack events arriving over the socket instead of HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from pydantic import SecretStr, ValidationError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.base import AcceptOutcome, ConnectionState, GatewayServices
from adapters.slack.app import SlackAdapter
from adapters.slack.config import SlackConfig
from adapters.slack.socket_mode import SlackSocketMode
from agent_core.messages import InboundMessage, ThreadKey
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import gateway_settings, running_gateway
from tests.waiting import eventually as wait_until
from tests.waiting import scaled

PING_S = 0.2
SILENCE_S = 1.0
# Classes whose coroutines run as tasks while a connection is up (for the leak check).
SDK_AND_OWN_CLASSES = {"SocketModeClient", "AsyncBaseSocketModeClient", "SlackSocketMode", "ConnectionSupervisor"}


class RecordingInbox:
    """An `accept` that dedupes like the gateway's inbox (by event id and by message) and
    records when each accepted message was committed."""

    def __init__(self) -> None:
        self.accepted: list[InboundMessage] = []
        self.duplicates: list[InboundMessage] = []
        self.committed_at: dict[str, float] = {}  # event id -> time.monotonic()
        self.calls = 0
        self.commit_delay_s = 0.0
        self.fail_next = False
        self._seen: set[str] = set()
        self.if_thread_live: list[bool] = []  # per call
        self.live_threads: set[ThreadKey] = set()

    async def accept(self, msg: InboundMessage, *, if_thread_live: bool = False) -> AcceptOutcome:
        self.calls += 1
        self.if_thread_live.append(if_thread_live)
        if if_thread_live and msg.thread not in self.live_threads:
            return AcceptOutcome.NOT_IN_LIVE_THREAD
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("database unavailable")
        keys = {f"event:{msg.event_id}", f"message:{msg.dedupe_key}"}
        if keys & self._seen:
            self.duplicates.append(msg)
            return AcceptOutcome.DUPLICATE
        self._seen |= keys  # claimed before the await, so concurrent redeliveries see it
        await asyncio.sleep(self.commit_delay_s)
        self.accepted.append(msg)
        self.committed_at[msg.event_id] = time.monotonic()
        return AcceptOutcome.ACCEPTED


async def not_known(_key: ThreadKey) -> bool:
    return False


def socket_config(slack: FakeSlack) -> SlackConfig:
    return SlackConfig(
        _env_file=None, bot_token=slack.bot_token, mode="socket", app_token=slack.app_token, api_url=slack.base_url
    )


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


@pytest.fixture
def inbox() -> RecordingInbox:
    return RecordingInbox()


@pytest.fixture
async def socket_mode(slack: FakeSlack, inbox: RecordingInbox) -> AsyncIterator[SlackSocketMode]:
    adapter = SlackAdapter(socket_config(slack), GatewayServices(accept=inbox.accept, is_live=not_known))
    connection = SlackSocketMode(
        adapter.bolt, slack.app_token, slack.base_url, ping_interval_s=PING_S, silence_timeout_s=SILENCE_S
    )
    await connection.start()
    await wait_until(lambda: connection.state == ConnectionState.CONNECTED, what="connected")
    yield connection
    await connection.stop()


def mention(ts: str, event_id: str | None = None) -> dict[str, Any]:
    return app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts=ts, event_id=event_id)


# --- configuration -----------------------------------------------------------------------------


def test_config_needs_the_credential_of_its_mode() -> None:
    # HTTP stays the default mode and, as before, needs only the signing secret.
    http = SlackConfig(_env_file=None, bot_token="xoxb-1", signing_secret="s")
    assert http.mode == "http" and http.configured
    assert SlackConfig(_env_file=None, bot_token="xoxb-1").missing() == ["SLACK_SIGNING_SECRET"]
    socket = SlackConfig(_env_file=None, bot_token="xoxb-1", mode="socket", app_token="xapp-1")
    assert socket.configured and socket.signing_secret is None
    for app_token in (None, ""):
        unset = SlackConfig(_env_file=None, bot_token="xoxb-1", mode="socket", app_token=app_token)
        assert not unset.configured and unset.missing() == ["SLACK_APP_TOKEN"]
    with pytest.raises(ValidationError, match="app-level token"):
        SlackConfig(_env_file=None, bot_token="xoxb-1", mode="socket", app_token="xoxb-bot")


async def test_socket_mode_refuses_http_deliveries_and_bad_arguments(inbox: RecordingInbox) -> None:
    config = SlackConfig(_env_file=None, bot_token="xoxb-1", mode="socket", app_token="xapp-1")
    adapter = SlackAdapter(config, GatewayServices(accept=inbox.accept, is_live=not_known))
    response = await adapter.handle(make_mocked_request("POST", "/slack/events"))
    assert response.status == 404
    with pytest.raises(ValueError, match="xapp"):
        SlackSocketMode(adapter.bolt, SecretStr("xoxb-1"))
    with pytest.raises(ValueError, match="ping_interval"):
        SlackSocketMode(adapter.bolt, "xapp-1", ping_interval_s=10, silence_timeout_s=15)


async def test_fake_connections_open_takes_only_the_app_token(slack: FakeSlack) -> None:
    client = AsyncWebClient(base_url=slack.base_url)
    for token, error in ((slack.bot_token, "not_allowed_token_type"), ("xapp-other", "invalid_auth")):
        with pytest.raises(SlackApiError) as raised:
            await client.apps_connections_open(app_token=token)
        assert raised.value.response["error"] == error
    url = (await client.apps_connections_open(app_token=slack.app_token))["url"]
    assert url.startswith(f"ws://127.0.0.1:{slack.port}/socket?ticket=")


# --- delivery ----------------------------------------------------------------------------------


async def test_event_is_accepted_once_and_acked_after_the_commit(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode
) -> None:
    # apps.connections.open was called with the app-level token, not the bot token.
    [open_call] = slack.calls_to("apps.connections.open")
    assert open_call.headers["authorization"] == f"Bearer {slack.app_token}"
    inbox.commit_delay_s = 0.3
    payload = mention("1700000001.000100", event_id="EvSOCK1")
    first = await slack.socket_send_event(payload)
    ack = await slack.wait_for_ack(first)
    assert ack.at >= inbox.committed_at["EvSOCK1"]
    [msg] = inbox.accepted
    assert (msg.channel, msg.text, msg.reply_in_thread) == ("C1", "why did GMV drop?", "1700000001.000100")

    # Slack redelivers the envelope: acknowledged again, not accepted again.
    await slack.socket_send_event(payload, retry_attempt=1, envelope_id=first)
    await slack.wait_for_ack(first, count=2)
    assert len(inbox.accepted) == 1 and len(inbox.duplicates) == 1
    # The `message` twin of the mention is not for the bot, but is acknowledged too.
    twin = await slack.socket_send_event(message("<@UBOT> why did GMV drop?", "U1", "C1", "1700000001.000100", "channel"))
    await slack.wait_for_ack(twin)
    assert len(inbox.accepted) == 1
    status = socket_mode.status()
    assert status.state == "connected" and status.last_event_at is not None
    assert status.connected_since is not None and status.last_frame_at is not None


async def test_only_a_thread_reply_without_a_mention_depends_on_the_thread_being_live(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode
) -> None:
    root = "1700000003.000100"
    inbox.live_threads.add(ThreadKey(platform="slack", workspace="T1", channel="C1", root=root))
    deliveries = [
        app_mention("<@UBOT> and by week?", "U1", "C1", ts="1700000003.000200", thread_ts=root),
        # The companion of that mention: for the bot whether or not the thread is live.
        message("<@UBOT> and by week?", "U1", "C1", "1700000003.000200", "channel", thread_ts=root),
        message("and by region?", "U1", "C1", "1700000003.000300", "channel", thread_ts=root),
        message("and by city?", "U1", "C1", "1700000003.000400", "channel", thread_ts="1700000003.000900"),
    ]
    for payload in deliveries:
        await slack.wait_for_ack(await slack.socket_send_event(payload))
    assert inbox.if_thread_live == [False, False, True, True]
    # The reply in a thread the bot is not part of is acknowledged and not stored.
    assert [m.message_id for m in inbox.accepted] == ["1700000003.000200", "1700000003.000300"]


async def test_malformed_envelope_is_acked_and_stores_nothing(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode, caplog: pytest.LogCaptureFixture
) -> None:
    bad = mention("1700000002.000100", event_id="EvBAD")
    bad["event"]["ts"] = 1700000002.0001  # from Slack's socket, but not the shape of a Slack event
    envelope = await slack.socket_send_event(bad)
    await slack.wait_for_ack(envelope)  # not redelivered for nothing
    assert inbox.calls == 0
    assert "bad fields: ts" in caplog.text and "GMV" not in caplog.text  # the body is never quoted
    good = await slack.socket_send_event(mention("1700000002.000200", event_id="EvGOOD"))
    await slack.wait_for_ack(good)
    assert [m.event_id for m in inbox.accepted] == ["EvGOOD"]


async def test_failed_commit_is_not_acked_and_the_redelivery_is_accepted(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode
) -> None:
    inbox.fail_next = True
    payload = mention("1700000002.000100", event_id="EvFAIL")
    first = await slack.socket_send_event(payload)
    await asyncio.sleep(0.5)
    assert slack.acks_of(first) == [] and inbox.accepted == []
    retry = await slack.socket_send_event(payload, retry_attempt=1)
    await slack.wait_for_ack(retry)
    assert [m.event_id for m in inbox.accepted] == ["EvFAIL"]


# --- supervision -------------------------------------------------------------------------------


@pytest.mark.parametrize("end", ["close_frame", "tcp_cut", "disconnect_message"])
async def test_ended_connection_is_reopened_and_events_keep_arriving(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode, end: str
) -> None:
    await slack.wait_for_ack(await slack.socket_send_event(mention("1700000003.000100")))
    if end == "disconnect_message":
        await slack.socket_send_disconnect()
    else:
        await slack.socket_drop(abort=end == "tcp_cut")
    await slack.wait_for_socket_connections(2)
    await slack.wait_for_ack(await slack.socket_send_event(mention("1700000004.000100")))
    assert [m.message_id for m in inbox.accepted] == ["1700000003.000100", "1700000004.000100"]
    await wait_until(lambda: socket_mode.state == ConnectionState.CONNECTED, what="connected again")
    await wait_until(lambda: slack.socket_open == 1, what="the old connection to close")


async def test_silent_connection_is_detected_and_replaced(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode
) -> None:
    states: list[str] = []

    async def watch() -> None:
        while True:
            state = socket_mode.state
            if not states or states[-1] != state:
                states.append(state)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    silent_since = time.monotonic()
    slack.socket_go_silent()
    await slack.wait_for_socket_connections(2, timeout=SILENCE_S + 2)
    replaced_after = time.monotonic() - silent_since
    # An event sent meanwhile is not lost: Slack (the fake) delivers it on the new connection.
    await slack.wait_for_ack(await slack.socket_send_event(mention("1700000005.000100")))
    await wait_until(lambda: socket_mode.state == ConnectionState.CONNECTED, what="connected again")
    watcher.cancel()
    assert replaced_after < scaled(SILENCE_S + 1)
    # connected -> reconnecting -> connected (the last step is what wait_until just saw).
    assert states[:2] == ["connected", "reconnecting"]
    assert len(inbox.accepted) == 1


async def test_supervisor_replaces_a_client_whose_reconnect_hangs(
    slack: FakeSlack, socket_mode: SlackSocketMode
) -> None:
    # The SDK's own reconnect hangs in a handshake the server never answers (aiohttp would wait
    # five minutes): only the supervisor's silence window gets the bot back.
    slack.socket_stall_handshakes()
    slack.socket_go_silent()
    await wait_until(lambda: socket_mode.state == ConnectionState.RECONNECTING, what="reconnecting")
    await wait_until(lambda: socket_mode.status().restarts >= 1, timeout=SILENCE_S + 2, what="a restart")
    slack.socket_stall_handshakes(False)
    await slack.wait_for_socket_connections(2, timeout=SILENCE_S + 3)
    await wait_until(lambda: socket_mode.state == ConnectionState.CONNECTED, what="connected again")
    await slack.wait_for_ack(await slack.socket_send_event(mention("1700000006.000100")))


async def test_stop_lets_commits_finish_then_closes_cleanly(
    slack: FakeSlack, inbox: RecordingInbox, socket_mode: SlackSocketMode
) -> None:
    inbox.commit_delay_s = 0.3
    envelope = await slack.socket_send_event(mention("1700000007.000100"))
    await wait_until(lambda: inbox.calls == 1, what="the commit to start")
    await socket_mode.stop()
    assert slack.acks_of(envelope)  # acknowledged before the socket closed
    assert socket_mode.status().state == "stopped" and socket_mode.status().connected_since is None
    await wait_until(lambda: slack.socket_open == 0, what="the server to see the close")
    # Nothing of the SDK's client or of the supervisor keeps running (the fake's tasks may).
    leftovers = [t.get_coro().__qualname__ for t in asyncio.all_tasks() if not t.done()]
    assert [name for name in leftovers if name.split(".")[0] in SDK_AND_OWN_CLASSES] == []
    await socket_mode.stop()  # idempotent


# --- through the gateway -----------------------------------------------------------------------


@pytest.fixture
async def gateway_over_socket(database_url, tmp_path) -> AsyncIterator[tuple]:
    """The real gateway configured with SLACK_MODE=socket: events arrive over Socket Mode."""
    async with FakeAnthropic() as anthropic, FakeSlack() as slack:
        settings = gateway_settings(
            database_url, tmp_path, anthropic, slack, SLACK_MODE="socket", SLACK_APP_TOKEN=slack.app_token
        )
        async with running_gateway(settings) as gw:
            yield gw, anthropic, slack


async def test_gateway_answers_a_mention_over_the_socket_once(gateway_over_socket) -> None:
    gateway, anthropic, slack = gateway_over_socket
    anthropic.script(Reply([text("GMV in **East China** fell 38%.")]), Reply([text("Second answer (must not happen).")]))
    payload = mention("1700000001.000100", event_id="EvGW1")
    first = await slack.socket_send_event(payload)
    await slack.socket_send_event(payload, retry_attempt=1, envelope_id=first)
    # Slack also sends the mention as a `message` event with its own event id.
    twin = await slack.socket_send_event(message("<@UBOT> why did GMV drop?", "U1", "C1", "1700000001.000100", "channel"))
    await slack.wait_for_ack(first, count=2)
    await slack.wait_for_ack(twin)
    await gateway.settled()
    [reply] = slack.posted(channel="C1")
    assert reply["thread_ts"] == "1700000001.000100" and "East China" in reply["markdown_text"]
    assert len(anthropic.requests) == 1
    assert await gateway.stored_events() == 1
    status, body = await gateway.get_json("/readyz")
    assert status == 200 and body["connections"]["slack"]["state"] == "connected"
