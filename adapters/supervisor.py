"""Keeps one long-lived platform connection running (Slack Socket Mode, the Feishu long connection).

A connection is a coroutine, `connect(monitor)`, that holds one client until it is cancelled;
it reconnects dropped sockets itself where its protocol says how (both platforms' clients do),
and reports to the monitor every frame it receives, every event, and every drop it is
recovering from. The supervisor replaces the client — cancels the coroutine, which closes its
client on the way out, and starts a new one — when the coroutine ends or raises, or when nothing
has arrived for `silence_timeout_s` (a socket that is open but dead, a reconnect stuck in a
handshake). The first replacement is immediate, further ones back off. The state it keeps is what
/readyz reports.

`SupervisedConnection` is the face both platforms' connections show their adapter (`start`,
`stop`, `state`, `status`); each supplies only `_connect`, its one client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Protocol

from adapters.base import ConnectionState, ConnectionStatus
from agent_core.retry import backoff_delay_s

log = logging.getLogger(__name__)

_CHECK_EVERY_S = 0.5
# aiohttp waits up to 10 s for the peer's close frame, which a dead peer never sends.
CLOSE_TIMEOUT_S = 2.0
# On close, events being committed get this long to finish and be acknowledged.
DRAIN_TIMEOUT_S = 5.0


class ConnectionMonitor(Protocol):
    """What a connection tells its supervisor."""

    def frame_received(self) -> None:
        """Any frame arrived (pongs included): the peer is alive."""

    def event_received(self) -> None:
        """A platform event arrived."""

    def connection_lost(self) -> None:
        """The socket dropped and the client is reconnecting by itself."""


Connect = Callable[[ConnectionMonitor], Coroutine[None, None, None]]


class ConnectionSupervisor:
    """Runs `connect` until `stop()`, replacing it when it ends or goes silent."""

    def __init__(
        self,
        name: str,
        connect: Connect,
        *,
        silence_timeout_s: float,
        max_restart_backoff_s: float = 60.0,
    ) -> None:
        self._name = name
        self._connect = connect
        self._silence_timeout_s = silence_timeout_s
        self._max_restart_backoff_s = max_restart_backoff_s
        self._state = ConnectionState.STOPPED
        self._connected_since: datetime | None = None
        self._last_frame = 0.0  # monotonic, for the silence check
        self._last_frame_at: datetime | None = None
        self._last_event_at: datetime | None = None
        self._started_at = 0.0  # monotonic start of the current connection
        self._restarts = 0
        self._failures = 0  # replacements since the connection last worked
        self._task: asyncio.Task[None] | None = None

    @property
    def state(self) -> ConnectionState:
        """connecting, connected, reconnecting or stopped."""
        return self._state

    @property
    def stopping(self) -> bool:
        """Whether `stop()` was called (a connection then takes no new events)."""
        return self._state == ConnectionState.STOPPED

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
        """Start connecting; returns at once (see `state`)."""
        if self._task is not None:
            return
        self._set_state(ConnectionState.CONNECTING)
        self._task = asyncio.create_task(self._supervise(), name=f"{self._name}-supervisor")

    async def stop(self) -> None:
        """Stop: the connection coroutine is cancelled and has closed its client on return."""
        task, self._task = self._task, None
        if task is None:
            return
        self._set_state(ConnectionState.STOPPED)
        task.cancel()
        await asyncio.wait({task})

    # --- ConnectionMonitor -----------------------------------------------------------------------

    def frame_received(self) -> None:
        self._last_frame = time.monotonic()
        self._last_frame_at = datetime.now(UTC)
        if self._state in (ConnectionState.CONNECTING, ConnectionState.RECONNECTING):
            log.info("%s: connected", self._name)
            self._set_state(ConnectionState.CONNECTED)
            self._connected_since = self._last_frame_at

    def event_received(self) -> None:
        self._last_event_at = datetime.now(UTC)

    def connection_lost(self) -> None:
        if self._state == ConnectionState.CONNECTED:
            log.info("%s: connection lost; reconnecting", self._name)
            self._set_state(ConnectionState.RECONNECTING)

    # --- supervision -----------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while True:
            self._started_at = time.monotonic()
            connection = asyncio.create_task(self._connect(self), name=f"{self._name}-connection")
            try:
                reason = await self._watch(connection)
            finally:
                # Also on stop(): the coroutine closes its client before the supervisor returns.
                connection.cancel()
                await asyncio.wait({connection})
            self._failures += 1
            delay = (
                backoff_delay_s(self._failures - 1, first_s=1.0, max_s=self._max_restart_backoff_s)
                if self._failures > 1
                else 0.0
            )
            log.warning("%s: %s; new connection in %.0fs", self._name, reason, delay)
            self._set_state(ConnectionState.RECONNECTING)
            await asyncio.sleep(delay)
            self._restarts += 1

    async def _watch(self, connection: asyncio.Task[None]) -> str:
        """Wait until the connection ends or goes silent; say which."""
        every_s = min(_CHECK_EVERY_S, self._silence_timeout_s / 4)
        while True:
            done, _ = await asyncio.wait({connection}, timeout=every_s)
            if done:
                error = None if connection.cancelled() else connection.exception()
                if error is not None:
                    # The type only above DEBUG: an error's text may quote a URL with a ticket.
                    log.debug("%s: the connection failed", self._name, exc_info=error)
                    return f"connection failed ({type(error).__name__})"
                return "connection ended"
            silent_s = time.monotonic() - max(self._last_frame, self._started_at)
            if silent_s >= self._silence_timeout_s:
                return f"no frame for {silent_s:.1f}s"
            if self._state == ConnectionState.CONNECTED:
                self._failures = 0

    def _set_state(self, state: ConnectionState) -> None:
        if self._state == ConnectionState.STOPPED and state != ConnectionState.CONNECTING:
            return  # stopping wins over late reports from the connection
        self._state = state
        if state != ConnectionState.CONNECTED:
            self._connected_since = None


class SupervisedConnection(ABC):
    """A long-lived platform connection kept running by its own `ConnectionSupervisor`."""

    def __init__(self, name: str, *, silence_timeout_s: float, max_restart_backoff_s: float) -> None:
        self._supervisor = ConnectionSupervisor(
            name,
            self._connect,
            silence_timeout_s=silence_timeout_s,
            max_restart_backoff_s=max_restart_backoff_s,
        )

    @property
    def state(self) -> ConnectionState:
        """connecting, connected, reconnecting or stopped."""
        return self._supervisor.state

    def status(self) -> ConnectionStatus:
        """A snapshot for readiness checks."""
        return self._supervisor.status()

    async def start(self) -> None:
        """Start connecting; returns at once (see `state`)."""
        await self._supervisor.start()

    async def stop(self) -> None:
        """Stop taking events, let those being committed be acknowledged, close the connection."""
        await self._supervisor.stop()

    @abstractmethod
    async def _connect(self, monitor: ConnectionMonitor) -> None:
        """Run one client until cancelled (the supervisor's connection coroutine)."""
