"""Socket Mode: receive Slack events over a websocket the app opens, instead of HTTP POSTs.

Envelopes go through the `SlackAdapter`'s own bolt app with slack-bolt's aiohttp
`AsyncSocketModeHandler`, so inbox, dedupe, ordering and replies are those of HTTP mode. Its
`handle` awaits `bolt.async_dispatch` — which, with `process_before_response=True`, runs the
listener and so commits the message (`accept`) — and only then sends the envelope ack; a listener
that raises gets status 500 and no ack, so Slack redelivers (and the inbox dedupes redeliveries).

slack_sdk's aiohttp `SocketModeClient` reconnects by itself: on a close frame, on a `disconnect`
message, and when its pings go unanswered (aiohttp's heartbeat closes such a socket). The
`ConnectionSupervisor` covers what it does not: any connection — or connection attempt — that
delivers nothing (no frame, not even a pong) for `silence_timeout_s` is replaced by a new client.
Frames are observed through the client's aiohttp session, built with a websocket response class
that reports every frame it returns; only public SDK attributes are used
(`aiohttp_client_session`, `current_session`, `socket_mode_request_listeners`; checked against
slack_sdk 3.47 / slack_bolt 1.30).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import ClientWebSocketResponse, WSMessage, WSMsgType
from pydantic import SecretStr
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.events import MalformedEvent, check_envelope
from adapters.supervisor import CLOSE_TIMEOUT_S, DRAIN_TIMEOUT_S, ConnectionMonitor, SupervisedConnection

log = logging.getLogger(__name__)

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


class SlackSocketMode(SupervisedConnection):
    """Feeds Slack events received over Socket Mode to the adapter's bolt app (the same dispatch
    as its HTTP endpoint)."""

    def __init__(
        self,
        bolt: AsyncApp,
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
        self._bolt = bolt
        self._app_token = token
        # The app token is passed per call; this client holds no token of its own.
        self._web_client = AsyncWebClient(base_url=api_url)
        self._ping_interval_s = ping_interval_s
        self._handler: AsyncSocketModeHandler | None = None
        self._monitor: ConnectionMonitor | None = None
        # Envelopes between receipt and ack, so that closing a client lets them finish.
        self._in_flight: set[asyncio.Task[Any]] = set()
        super().__init__(
            "slack socket mode", silence_timeout_s=silence_timeout_s, max_restart_backoff_s=max_restart_backoff_s
        )

    # --- one client --------------------------------------------------------------------------

    async def _connect(self, monitor: ConnectionMonitor) -> None:
        """Run one SDK client until cancelled (the supervisor's connection coroutine)."""
        handler = AsyncSocketModeHandler(
            self._bolt,
            app_token=self._app_token,
            logger=log.getChild("sdk"),
            web_client=self._web_client,
            ping_interval=self._ping_interval_s,
        )
        self._handler, self._monitor = handler, monitor
        client = handler.client
        try:
            # Wrap bolt's handler (receipt time, drain on close); it still acks after the commit.
            # slack_sdk types the listener list with the base client class, bolt's handler with
            # its aiohttp subclass: the same object at run time.
            client.socket_mode_request_listeners.remove(handler.handle)  # type: ignore[arg-type]
            client.socket_mode_request_listeners.append(self._on_request)
            # Swap in a session whose websockets report their frames (see the module docstring).
            # If the SDK ever replaces it, frames go unseen and the supervisor starts a new client.
            await client.aiohttp_client_session.close()
            client.aiohttp_client_session = aiohttp.ClientSession(
                ws_response_class=_frame_reporting_websocket(self._on_frame)
            )
            # connect() retries until it is connected; then the SDK's own tasks receive,
            # and reconnect, until the client is closed.
            await client.connect()
            await asyncio.get_running_loop().create_future()
        finally:
            if self._in_flight:
                await asyncio.wait(set(self._in_flight), timeout=DRAIN_TIMEOUT_S)
            self._handler = self._monitor = None
            await _close(client)

    # --- callbacks from the SDK ---------------------------------------------------------------

    def _on_frame(self, websocket: ClientWebSocketResponse, frame_type: WSMsgType) -> None:
        if self._handler is None or self._monitor is None or websocket is not self._handler.client.current_session:
            return  # the last frames of a replaced or abandoned websocket
        if frame_type in _LIVE_FRAMES:
            self._monitor.frame_received()
        else:
            self._monitor.connection_lost()  # the SDK reconnects

    async def _on_request(self, client: AsyncBaseSocketModeClient, request: SocketModeRequest) -> None:
        """A socket mode request listener: bolt dispatches (commits) and then acks."""
        handler, monitor = self._handler, self._monitor
        if handler is None or monitor is None or client is not handler.client or self._supervisor.stopping:
            return  # left unacknowledged: Slack redelivers it on a live connection
        if request.type == "events_api":
            monitor.event_received()
        try:
            check_envelope(request.payload)  # as `SlackAdapter.handle` does for HTTP deliveries
        except MalformedEvent as exc:
            # Acknowledged, or Slack would redeliver it for nothing; bolt never sees it.
            log.warning("slack socket mode: %s envelope ignored: %s", request.type, exc)
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
            return
        task = asyncio.current_task()
        assert task is not None  # the SDK runs each envelope's listeners in a task
        self._in_flight.add(task)
        try:
            await handler.handle(client, request)
        finally:
            self._in_flight.discard(task)


async def _close(client: AsyncBaseSocketModeClient) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await client.close()
    except TimeoutError:
        # Stuck waiting for a dead peer's close frame. The websocket is marked closed by now, so
        # a second close() skips that wait and finishes the teardown (the SDK's tasks and its
        # HTTP session).
        await client.close()
