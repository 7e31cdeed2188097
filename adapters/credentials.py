"""A platform's credentials checked once at start-up, in the background.

A wrong token or secret otherwise shows only when the first user is not answered. The check is
one cheap call (Slack `auth.test`, a Feishu tenant token); its outcome is one log line and the
platform's `credentials` entry in /readyz. A slow or unreachable endpoint never blocks or stops
start-up: the check says so and tries again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from adapters.base import CredentialState, CredentialStatus

log = logging.getLogger(__name__)

ATTEMPT_TIMEOUT_S = 10.0
RETRY_AFTER_S = 60.0


class CredentialsRefused(Exception):
    """The platform answered and refused the credentials (the reason names what to fix)."""


# Returns who the credentials are ("bot @ba-agent in workspace Acme (T1)"); raises
# CredentialsRefused, or anything else for "could not ask".
Probe = Callable[[], Awaitable[str]]


class CredentialCheck:
    """Runs `probe` until it gives a verdict; `status` is what /readyz shows meanwhile."""

    def __init__(
        self, title: str, probe: Probe, *, timeout_s: float = ATTEMPT_TIMEOUT_S, retry_after_s: float = RETRY_AFTER_S
    ) -> None:
        self._title = title
        self._probe = probe
        self._timeout_s = timeout_s
        self._retry_after_s = retry_after_s
        self.status = CredentialStatus(state=CredentialState.CHECKING)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self._timeout_s):
                    who = await self._probe()
            except CredentialsRefused as exc:
                self.status = CredentialStatus(state=CredentialState.REFUSED, detail=str(exc))
                log.error("%s credentials refused: %s", self._title, exc)
                return
            except Exception as exc:  # timeouts, connection errors, 5xx: ask again
                timed_out = isinstance(exc, TimeoutError)
                reason = f"no answer within {self._timeout_s:g} s" if timed_out else type(exc).__name__
                self.status = CredentialStatus(state=CredentialState.UNVERIFIED, detail=reason)
                log.warning(
                    "%s credentials not verified yet (%s); checking again in %g s",
                    self._title, reason, self._retry_after_s,
                )  # fmt: skip
                await asyncio.sleep(self._retry_after_s)
                continue
            self.status = CredentialStatus(state=CredentialState.OK, detail=who)
            log.info("%s credentials ok: %s", self._title, who)
            return
