"""Socket Mode: receive Slack events over a websocket the app opens, instead of HTTP POSTs.

Envelopes go through the `SlackAdapter`'s own bolt app with slack-bolt's aiohttp
`AsyncSocketModeHandler`, so inbox, dedupe, ordering and replies are those of HTTP mode. Its
`handle` awaits `bolt.async_dispatch` — which, with `process_before_response=True`, runs the
listener and so commits the message (`accept`) — and only then sends the envelope ack; a listener
that raises gets status 500 and no ack, so Slack redelivers (and the inbox dedupes redeliveries).

slack_sdk's aiohttp `SocketModeClient` reconnects by itself: on a close frame, on a `disconnect`
message, and when its pings go unanswered (aiohttp's heartbeat closes such a socket). A
supervisor covers what it does not: any connection — or connection attempt — that delivers
nothing (no frame, not even a pong) for `silence_timeout_s` is replaced by a new client, with
backoff. Frames are observed through the client's aiohttp session, built with a websocket
response class that reports every frame it returns; only public SDK attributes are used
(`aiohttp_client_session`, `current_session`, `socket_mode_request_listeners`; checked against
slack_sdk 3.47 / slack_bolt 1.30).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import ClientWebSocketResponse, WSMessage, WSMsgType
from pydantic import SecretStr
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.base import ConnectionState, ConnectionStatus
from adapters.slack.app import SlackAdapter

log = logging.getLogger(__name__)

_SUPERVISE_EVERY_S = 0.5
# aiohttp waits up to 10 s for the peer's close frame, which a dead peer never sends.
_CLOSE_TIMEOUT_S = 2.0
# On stop, envelopes being committed get this long to finish and be acknowledged.
_DRAIN_TIMEOUT_S = 5.0
# Frames that prove the peer is alive; CLOSE, CLOSING, CLOSED and ERROR mean the socket is gone.
_LIVE_FRAMES = frozenset({WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.PING, WSMsgType.PONG})


FrameReport = Callable[[ClientWebSocketResponse, WSMsgType], None]


def _frame_reporting_websocket(report: FrameReport) -> type[ClientWebSocketResponse]:
    """An aiohttp websocket class that calls `report(websocket, frame_type)` for every frame the
    SDK's receive loop gets (pongs included, which the SDK consumes without any hook)."""

    class FrameReportingWebSocket(ClientWebSocketResponse):
        async def receive(self, timeout: float | None = None) -> WSMessage:
            message: WSMessage = await super().receive(timeout)
            report(self, message.type)
            return message

    return FrameReportingWebSocket


class SlackSocketMode:
    """Receives the adapter's Slack events over Socket Mode; `start()`, `stop()`, `status()`."""

    def __init__(
        self,
        adapter: SlackAdapter,
        app_token: str | SecretStr,
        api_url: str = "https://slack.com/api/",
        *,
        ping_interval_s: float = 10.0,
        silence_timeout_s: float = 30.0,
        max_restart_backoff_s: float = 60.0,
    ) -> None:
        """`api_url` is the Web API base URL `apps.connections.open` is called on; the client
        pings every `ping_interval_s`, so a healthy connection yields a pong that often."""
        token = app_token.get_secret_value() if isinstance(app_token, SecretStr) else app_token
        if not token.startswith("xapp-"):
            raise ValueError("Socket Mode needs an app-level token (xapp-…)")
        if silence_timeout_s <= 2 * ping_interval_s:
            # Otherwise a healthy but idle connection (one pong per ping) would look silent.
            raise ValueError("silence_timeout_s must exceed twice ping_interval_s")
        self._adapter = adapter
        self._app_token = token
        # The app token is passed per call; this client holds no token of its own.
        self._web_client = AsyncWebClient(base_url=api_url)
        self._ping_interval_s = ping_interval_s
        self._silence_timeout_s = silence_timeout_s
        self._max_restart_backoff_s = max_restart_backoff_s
        self._state = ConnectionState.STOPPED
        self._connected_since: datetime | None = None
        self._last_frame: float | None = None  # monotonic, for the silence check
        self._last_frame_at: datetime | None = None
        self._last_event_at: datetime | None = None
        self._started_at = 0.0  # monotonic start of the current client
        self._restarts = 0
        self._handler: AsyncSocketModeHandler | None = None
        self._connect_task: asyncio.Task[None] | None = None
        self._supervisor: asyncio.Task[None] | None = None
        # Envelopes between receipt and ack, so that stop() lets them finish.
        self._in_flight: set[asyncio.Task[Any]] = set()

    @property
    def state(self) -> ConnectionState:
        """connecting, connected, reconnecting or stopped."""
        return self._state

    def status(self) -> ConnectionStatus:
        """A snapshot for readiness checks."""
        return ConnectionStatus(
            state=self._state,
            connected_since=self._connected_since,
            last_frame_at=self._last_frame_at,
            last_event_at=self._last_event_at,
            restarts=self._restarts,
        )

    async def start(self) -> None:
        """Open the connection and start supervising it; returns at once (see `state`)."""
        if self._supervisor is not None:
            return
        self._set_state(ConnectionState.CONNECTING)
        await self._start_client()
        self._supervisor = asyncio.create_task(self._supervise(), name="slack-socket-mode-supervisor")

    async def stop(self) -> None:
        """Stop taking envelopes, let those being committed be acknowledged, close the connection."""
        if self._supervisor is None:
            return
        self._set_state(ConnectionState.STOPPED)
        self._supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._supervisor
        self._supervisor = None
        if self._in_flight:
            await asyncio.wait(set(self._in_flight), timeout=_DRAIN_TIMEOUT_S)
        await self._stop_client()

    # --- supervision -------------------------------------------------------------------------

    async def _supervise(self) -> None:
        failures = 0
        every_s = min(_SUPERVISE_EVERY_S, self._silence_timeout_s / 4)
        while True:
            await asyncio.sleep(every_s)
            silent_s = time.monotonic() - max(self._last_frame or 0.0, self._started_at)
            if silent_s < self._silence_timeout_s:
                if self._state == ConnectionState.CONNECTED:
                    failures = 0
                continue
            failures += 1
            delay = min(2 ** (failures - 1), self._max_restart_backoff_s) if failures > 1 else 0
            log.warning("slack socket mode: no frame for %.1fs; new connection in %.0fs", silent_s, delay)
            self._set_state(ConnectionState.RECONNECTING)
            try:
                await self._stop_client()
                if delay:
                    await asyncio.sleep(delay)
                self._restarts += 1
                await self._start_client()
            except Exception:
                # The supervisor must outlive any one failed restart: the next round retries.
                log.exception("slack socket mode: replacing the connection failed")

    async def _start_client(self) -> None:
        self._started_at = time.monotonic()
        handler = AsyncSocketModeHandler(
            self._adapter.bolt,
            app_token=self._app_token,
            logger=log.getChild("sdk"),
            web_client=self._web_client,
            ping_interval=self._ping_interval_s,
        )
        self._handler = handler  # set first: a stop() from here on closes it
        client = handler.client
        # Wrap bolt's handler (receipt time, drain on stop); it still acks after the commit.
        # slack_sdk types the listener list with the base client class, bolt's handler with its
        # aiohttp subclass: the same object at run time.
        client.socket_mode_request_listeners.remove(handler.handle)  # type: ignore[arg-type]
        client.socket_mode_request_listeners.append(self._on_request)
        # Swap in a session whose websockets report their frames (see the module docstring). If
        # the SDK ever replaces it, frames go unseen and the supervisor starts a fresh client.
        await client.aiohttp_client_session.close()
        client.aiohttp_client_session = aiohttp.ClientSession(
            ws_response_class=_frame_reporting_websocket(self._on_frame)
        )
        # connect() retries until it is connected (or the client is closed).
        self._connect_task = asyncio.create_task(client.connect(), name="slack-socket-mode-connect")

    async def _stop_client(self) -> None:
        if self._connect_task is not None:
            self._connect_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._connect_task
        if self._handler is not None:
            client = self._handler.client
            try:
                async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                    await client.close()
            except TimeoutError:
                # Stuck waiting for a dead peer's close frame. The websocket is marked closed
                # by now, so a second close() skips that wait and finishes the teardown (the
                # SDK's tasks and its HTTP session).
                await client.close()
        # Cleared only now: if this is cancelled half-way, the next call closes it again.
        self._handler = self._connect_task = None

    # --- callbacks from the SDK ---------------------------------------------------------------

    def _on_frame(self, websocket: ClientWebSocketResponse, frame_type: WSMsgType) -> None:
        if self._handler is None or websocket is not self._handler.client.current_session:
            return  # the last frames of a replaced or abandoned websocket
        if frame_type not in _LIVE_FRAMES:
            if self._state == ConnectionState.CONNECTED:
                log.info("slack socket mode: connection lost (%s); the SDK reconnects", frame_type.name)
                self._set_state(ConnectionState.RECONNECTING)
            return
        self._last_frame = time.monotonic()
        self._last_frame_at = datetime.now(UTC)
        if self._state in (ConnectionState.CONNECTING, ConnectionState.RECONNECTING):
            log.info("slack socket mode: connected")
            self._set_state(ConnectionState.CONNECTED)
            self._connected_since = self._last_frame_at

    async def _on_request(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        """A socket mode request listener: bolt dispatches (commits) and then acks."""
        handler = self._handler
        if handler is None or client is not handler.client or self._state == ConnectionState.STOPPED:
            return  # left unacknowledged: Slack redelivers it on a live connection
        if request.type == "events_api":
            self._last_event_at = datetime.now(UTC)
        task = asyncio.current_task()
        assert task is not None  # the SDK runs each envelope's listeners in a task
        self._in_flight.add(task)
        try:
            await handler.handle(client, request)
        finally:
            self._in_flight.discard(task)

    def _set_state(self, state: ConnectionState) -> None:
        if self._state == ConnectionState.STOPPED and state != ConnectionState.CONNECTING:
            return  # stopping wins over late reports from the client
        self._state = state
        if state != ConnectionState.CONNECTED:
            self._connected_since = None
