"""Long-connection mode: receive events over lark-oapi's websocket client instead of a webhook.

lark-oapi's `ws.Client` blocks in `start()` and drives everything through one module-level event
loop (`lark_oapi.ws.client.loop`, captured at import). So the client runs in a dedicated thread
that installs a fresh loop as that module global before building the client; only one long
connection can run per process. Each event is parsed and committed on the service loop
(`run_coroutine_threadsafe(…).result()`), and the frame is acknowledged only after the commit,
so a failure makes Feishu redeliver rather than lose the event.

The SDK reconnects dropped connections by itself. A supervisor on the service loop covers what it
does not: a silent connection (no frame, not even a pong, for `ws_silence_timeout_s`) and a client
thread that died; both restart the client with backoff.

The SDK offers no public stop and no frame hook: `_MonitoredWsClient` overrides
`_handle_message` (to time frames) and shutdown calls `_disconnect`. These are the only private
lark-oapi members used (checked against lark-oapi 1.7.x).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import UTC, datetime
from typing import Any

import lark_oapi as lark
import lark_oapi.ws.client as lark_ws_client

from adapters.base import AcceptMessage, ConnectionState, ConnectionStatus
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import Ignored, KnownThread, MalformedEvent, parse_event_in_context
from adapters.feishu.webhook import BotOpenIdProvider

log = logging.getLogger(__name__)

_ACCEPT_TIMEOUT_S = 10.0
_SUPERVISE_EVERY_S = 0.5
_STOP_POLL_S = 0.5


class _EventSink:
    """The ws client's event handler: it calls `_do_without_validation(payload)` for every event
    frame and acknowledges the frame when that returns (an exception answers 500)."""

    def __init__(self, deliver: Any) -> None:
        self._deliver = deliver

    def _do_without_validation(self, payload: bytes) -> None:
        self._deliver(payload)


class _MonitoredWsClient(lark.ws.Client):
    """lark-oapi's ws client, reporting every received frame (pongs included)."""

    def __init__(self, *args: Any, on_frame: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_frame = on_frame

    async def _handle_message(self, msg: bytes) -> None:
        self._on_frame()
        await super()._handle_message(msg)


class FeishuLongConnection:
    """Receives Feishu events over a long connection and hands messages to `accept`."""

    def __init__(
        self,
        config: FeishuConfig,
        accept: AcceptMessage,
        bot_open_id_provider: BotOpenIdProvider,
        known_thread: KnownThread,
        *,
        max_restart_backoff_s: float = 60.0,
    ) -> None:
        self._config = config
        self._accept = accept
        self._bot_open_id = bot_open_id_provider
        self._known_thread = known_thread
        self._max_restart_backoff_s = max_restart_backoff_s
        self._lock = threading.Lock()  # guards the status fields, written from the ws thread
        self._state = ConnectionState.STOPPED
        self._connected_since: datetime | None = None
        self._last_frame: float | None = None  # monotonic, for the silence check
        self._last_frame_at: datetime | None = None
        self._last_event_at: datetime | None = None
        self._started_at = 0.0  # monotonic start of the current client
        self._restarts = 0
        self._service_loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ws_loop: asyncio.AbstractEventLoop | None = None
        self._supervisor: asyncio.Task[None] | None = None

    @property
    def state(self) -> ConnectionState:
        """connecting, connected, reconnecting or stopped."""
        return self._state

    def status(self) -> ConnectionStatus:
        """A snapshot for readiness checks."""
        with self._lock:
            return ConnectionStatus(
                state=self._state,
                connected_since=self._connected_since,
                last_frame_at=self._last_frame_at,
                last_event_at=self._last_event_at,
                restarts=self._restarts,
            )

    async def start(self) -> None:
        """Start the client thread and its supervisor; returns at once (see `state`)."""
        if self._supervisor is not None:
            return
        self._service_loop = asyncio.get_running_loop()
        self._set_state(ConnectionState.CONNECTING)
        self._start_client()
        self._supervisor = asyncio.create_task(self._supervise(), name="feishu-longconn-supervisor")

    async def stop(self) -> None:
        """Close the connection and stop the client thread."""
        if self._supervisor is None:
            return
        self._set_state(ConnectionState.STOPPED)
        self._supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._supervisor
        self._supervisor = None
        await self._stop_client()

    # --- supervision -------------------------------------------------------------------------

    async def _supervise(self) -> None:
        failures = 0
        while True:
            await asyncio.sleep(_SUPERVISE_EVERY_S)
            alive = self._thread is not None and self._thread.is_alive()
            with self._lock:
                heard = max(self._last_frame or 0.0, self._started_at)
            silent_s = time.monotonic() - heard
            if alive and silent_s < self._config.ws_silence_timeout_s:
                if self._state == ConnectionState.CONNECTED:
                    failures = 0
                continue
            reason = "client thread ended" if not alive else f"no frame for {silent_s:.0f}s"
            failures += 1
            delay = min(2 ** (failures - 1), self._max_restart_backoff_s) if failures > 1 else 0
            log.warning("feishu long connection: %s; restarting in %.0fs", reason, delay)
            self._set_state(ConnectionState.RECONNECTING)
            await self._stop_client()
            if delay:
                await asyncio.sleep(delay)
            with self._lock:
                self._restarts += 1
            self._start_client()

    def _start_client(self) -> None:
        with self._lock:
            self._started_at = time.monotonic()
            self._connected_since = None
        # Created here (not on the thread) so that `_stop_client` always has a loop to stop; a
        # stop requested before the loop runs makes its first run return at once.
        self._ws_loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._run_client, args=(self._ws_loop,), name="feishu-longconn", daemon=True
        )
        self._thread.start()

    async def _stop_client(self) -> None:
        thread, ws_loop = self._thread, self._ws_loop
        if thread is None or ws_loop is None:
            return
        rounds = 0
        while thread.is_alive():
            # Asked again each round: a stop that lands in the SDK's initial connect is swallowed
            # by its retry path, and the next one ends it. A thread stuck in a blocking call (the
            # SDK fetches its endpoint without a timeout) must still end before the next client
            # starts, as they share the SDK's module loop.
            with contextlib.suppress(RuntimeError):  # the loop is closed: the thread is ending
                ws_loop.call_soon_threadsafe(ws_loop.stop)
            await asyncio.to_thread(thread.join, _STOP_POLL_S)
            rounds += 1
            if rounds % 20 == 0:
                log.warning(
                    "feishu long connection: still waiting for the old client thread to end"
                )
        self._thread = self._ws_loop = None

    # --- the client thread -------------------------------------------------------------------

    def _run_client(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        # The SDK schedules everything on this module global (see the module docstring); the
        # client must also be built here, as its constructor binds a task to the current loop.
        lark_ws_client.loop = loop
        client: _MonitoredWsClient | None = None
        try:
            client = _MonitoredWsClient(
                self._config.app_id,
                self._config.app_secret.get_secret_value(),
                log_level=lark.LogLevel.WARNING,
                event_handler=_EventSink(self._deliver),
                domain=self._config.domain,
                auto_reconnect=True,
                on_frame=self._on_frame,
            )
            client.on_reconnecting = lambda: self._set_state(ConnectionState.RECONNECTING)
            client.start()
        except RuntimeError as exc:
            if "Event loop stopped" not in str(exc):  # that one is how `_stop_client` ends it
                log.exception("feishu long connection: client failed")
        except Exception:
            log.exception("feishu long connection: client failed")
        finally:
            _shutdown(loop, client)

    def _on_frame(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._last_frame = now
            self._last_frame_at = datetime.now(UTC)
            if self._state != ConnectionState.STOPPED and self._state != ConnectionState.CONNECTED:
                self._state = ConnectionState.CONNECTED
                self._connected_since = self._last_frame_at
                log.info("feishu long connection: connected")

    def _deliver(self, payload: bytes) -> None:
        """Runs on the ws thread: process the event on the service loop, wait for the commit."""
        loop = self._service_loop
        if loop is None or loop.is_closed():
            raise RuntimeError("service loop is gone")
        future = asyncio.run_coroutine_threadsafe(self._process(payload), loop)
        try:
            future.result(timeout=_ACCEPT_TIMEOUT_S)
        except FutureTimeout:
            future.cancel()
            raise

    async def _process(self, payload: bytes) -> None:
        try:
            event = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            log.warning("feishu long connection: event frame is not JSON; dropped")
            return
        if not isinstance(event, dict):
            return
        try:
            result = await parse_event_in_context(
                event, config=self._config, bot_open_id=await self._bot_open_id(), known_thread=self._known_thread
            )
        except MalformedEvent as exc:
            # Redelivery would not fix it: acknowledge and drop.
            log.warning("feishu long connection: malformed event dropped: %s", exc)
            return
        if isinstance(result, Ignored):
            log.debug("feishu long connection: ignored: %s", result.reason)
            return
        outcome = await self._accept(result)
        with self._lock:
            self._last_event_at = datetime.now(UTC)
        log.info("feishu long connection: message %s %s", result.message_id, outcome)

    def _set_state(self, state: ConnectionState) -> None:
        with self._lock:
            if self._state == ConnectionState.STOPPED and state != ConnectionState.CONNECTING:
                return  # stopping wins over late reports from the client thread
            self._state = state
            if state != ConnectionState.CONNECTED:
                self._connected_since = None


def _shutdown(loop: asyncio.AbstractEventLoop, client: _MonitoredWsClient | None) -> None:
    """Cancel the client's tasks, close its socket, close the loop (on the client thread)."""
    # Cancel first: the SDK's receive loop would otherwise see the closed socket and reconnect.
    for _ in range(3):
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not tasks:
            break
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))
    if client is not None:
        try:
            loop.run_until_complete(asyncio.wait_for(client._disconnect(), timeout=2.0))
        except Exception as exc:  # best effort: the socket dies with the loop anyway
            log.debug("feishu long connection: disconnect failed: %s", exc)
    loop.close()
