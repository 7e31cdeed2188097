"""How a Feishu Open API call is made: the tenant token, retries, per-chat pacing, typed failures.

An API call is an *attempt* function given the tenant_access_token; `FeishuTransport.call`
runs it until it succeeds. Rate limits (HTTP 429, codes 230020 / 11232 / 99991400) and transient
errors (5xx, network, non-JSON replies) are retried with the shared backoff, or after the wait
named by `x-ogw-ratelimit-reset`; a rejected token is replaced once; sends to one chat are paced
to Feishu's 5 messages per second. Failures become `FeishuApiError`.

The token is fetched from Feishu's public auth API (`auth/v3/tenant_access_token/internal`) and
cached here, not in lark-oapi's process-wide `TokenManager`, which has no way to drop a token
Feishu rejected (expired early, app secret rotated).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from pydantic import BaseModel, ValidationError

from adapters.download import AttachmentError
from adapters.feishu.config import FeishuConfig
from agent_core.retry import backoff_delay_s

log = logging.getLogger(__name__)

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
# Feishu's "slow down" codes: message send frequency (230020), internal send flow control (11232)
# and the gateway's generic limit (99991400, usually with HTTP 429).
RATE_LIMIT_CODES = frozenset({230020, 11232, 99991400})
# The cached tenant token was rejected (expired early, app secret rotated): fetch a new one.
TOKEN_INVALID_CODES = frozenset({99991661, 99991663})

# Renew the token this long before Feishu's expiry, so that no call starts with one about to lapse.
_TOKEN_RENEW_MARGIN_S = 10 * 60
_DOWNLOAD_CHUNK = 256 * 1024


class FeishuApiError(Exception):
    """A Feishu Open API call failed (after retries, where retrying made sense)."""

    def __init__(
        self,
        op: str,
        code: int,
        msg: str,
        *,
        http_status: int | None = None,
        log_id: str | None = None,
    ) -> None:
        self.op, self.code, self.msg, self.http_status, self.log_id = op, code, msg, http_status, log_id
        detail = f"{op} failed: code={code} msg={msg!r}"
        if http_status is not None:
            detail += f" http={http_status}"
        if log_id:
            detail += f" log_id={log_id}"
        super().__init__(detail)


@dataclass(frozen=True)
class Outcome:
    """One attempt's outcome, whichever library made the request."""

    code: int
    msg: str
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    value: Any = None


Attempt = Callable[[str], Awaitable[Outcome]]  # given the tenant token

TRANSIENT_ERRORS = (
    aiohttp.ClientError,
    asyncio.TimeoutError,
    json.JSONDecodeError,  # an HTML error page from a proxy instead of Feishu's JSON
    UnicodeDecodeError,
)


class _TokenReply(BaseModel):
    code: int
    msg: str = ""
    tenant_access_token: str = ""
    expire: int = 0  # seconds


class TenantToken:
    """One app's tenant_access_token (Feishu: valid two hours), fetched one at a time."""

    def __init__(self, config: FeishuConfig, session: Callable[[], aiohttp.ClientSession]) -> None:
        self._config = config
        self._session = session
        self._token: str | None = None
        self._renew_at = 0.0  # monotonic
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        """The cached token, or a fresh one. Raises FeishuApiError."""
        async with self._lock:
            if self._token is None or time.monotonic() >= self._renew_at:
                self._token, expire_s = await self._fetch()
                self._renew_at = time.monotonic() + max(expire_s - _TOKEN_RENEW_MARGIN_S, 0)
            return self._token

    def reject(self, token: str) -> None:
        """Feishu refused `token`: the next `get()` fetches another (unless one already did)."""
        if token == self._token:
            self._token = None

    async def _fetch(self) -> tuple[str, int]:
        body = {"app_id": self._config.app_id, "app_secret": self._config.app_secret.get_secret_value()}
        async with self._session().post(f"{self._config.domain}{TOKEN_PATH}", json=body) as response:
            status, raw = response.status, await response.read()
            log_id = response.headers.get("x-tt-logid")
        try:
            reply = _TokenReply.model_validate_json(raw)
        except ValidationError:
            raise FeishuApiError("tenant token", -1, "the reply is not a token", http_status=status) from None
        if reply.code != 0 or not reply.tenant_access_token:
            raise FeishuApiError("tenant token", reply.code, reply.msg, http_status=status, log_id=log_id)
        return reply.tenant_access_token, reply.expire


class ChatPacer:
    """At most `rate` sends per second to one chat (a sliding window), in call order.

    Not aiolimiter: its leaky bucket lets a full bucket's burst through and then one send every
    1/`rate` s, so `rate` + 1 sends land within one second (six in 0.2 s at 5/s), which a
    per-chat limit counted over any second refuses. A window of send times per chat is what
    keeps every second within the limit.
    """

    _MAX_IDLE_KEYS = 1024

    def __init__(self, rate: float) -> None:
        self._limit = max(1, int(rate))
        self._window = self._limit / rate
        self._sent: dict[str, deque[float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def wait(self, key: str) -> None:
        """Return when one more send to `key` keeps it within the rate."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            sent = self._sent.setdefault(key, deque())
            now = time.monotonic()
            while sent and now - sent[0] >= self._window:
                sent.popleft()
            if len(sent) >= self._limit:
                await asyncio.sleep(self._window - (now - sent[0]))
                sent.popleft()
            sent.append(time.monotonic())
        self._prune()

    def _prune(self) -> None:
        # Forget chats that have been quiet for a window, so the maps do not grow without bound.
        if len(self._sent) <= self._MAX_IDLE_KEYS:
            return
        now = time.monotonic()
        for key in [k for k, q in self._sent.items() if not q or now - q[-1] >= self._window]:
            if not self._locks[key].locked():
                del self._sent[key], self._locks[key]


class FeishuTransport:
    """Runs attempts with the app's token, retrying what is worth retrying (one per app)."""

    def __init__(
        self,
        config: FeishuConfig,
        *,
        max_attempts: int,
        backoff_base_s: float,
        max_backoff_s: float,
        timeout_s: float,
        transient_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._max_backoff_s = max_backoff_s
        self._timeout_s = timeout_s
        self._transient = TRANSIENT_ERRORS + transient_errors
        self._http: aiohttp.ClientSession | None = None
        self.token = TenantToken(config, self.session)
        self.pacer = ChatPacer(config.sends_per_second_per_chat)

    def session(self) -> aiohttp.ClientSession:
        """The aiohttp session for requests made without the SDK (token, downloads)."""
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_read=self._timeout_s)
            )
        return self._http

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def call(self, op: str, attempt: Attempt, *, pace_key: str | None = None) -> Any:
        """Run `attempt` until it succeeds; its value, or FeishuApiError."""
        token_renewed = False
        for n in range(self._max_attempts):
            last = n == self._max_attempts - 1
            if pace_key is not None:
                await self.pacer.wait(pace_key)
            token = ""
            try:
                token = await self.token.get()
                result = await attempt(token)
            except FeishuApiError as exc:  # the token fetch: classified like any call
                result = Outcome(exc.code, f"tenant token: {exc.msg}", exc.http_status)
            except self._transient as exc:
                if last:
                    raise FeishuApiError(op, -1, f"{type(exc).__name__}: {exc}") from exc
                delay = self._backoff(n)
                log.warning("feishu %s: %s; retrying in %.1fs", op, type(exc).__name__, delay)
                await asyncio.sleep(delay)
                continue
            if result.code == 0 and (result.status is None or result.status < 400):
                return result.value
            error = FeishuApiError(
                op, result.code, result.msg, http_status=result.status, log_id=result.headers.get("x-tt-logid")
            )
            if result.code in TOKEN_INVALID_CODES and not token_renewed:
                token_renewed = True
                self.token.reject(token)
                continue
            if result.status == 429 or result.code in RATE_LIMIT_CODES:
                delay = retry_after(result.headers) or self._backoff(n)
            elif result.status is not None and result.status >= 500:
                delay = self._backoff(n)
            else:
                raise error
            if last:
                raise error
            log.warning(
                "feishu %s: code %s (http %s); retrying in %.1fs", op, result.code, result.status, delay
            )
            await asyncio.sleep(min(delay, self._max_backoff_s))
        raise FeishuApiError(op, -1, "no attempt succeeded")

    def _backoff(self, attempt: int) -> float:
        return backoff_delay_s(attempt, first_s=self._backoff_base_s, max_s=self._max_backoff_s, jitter=0.2)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds Feishu asks to wait (x-ogw-ratelimit-reset, or a standard Retry-After)."""
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            return max(float(headers[name]), 0.0)
        except (KeyError, ValueError):
            continue
    return None


async def stream_to_file(content: aiohttp.StreamReader, dest: Path, max_bytes: int) -> None:
    """Copy a response body to `dest` via a temporary file, aborting past `max_bytes`."""
    await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
    partial = dest.with_name(f".{uuid.uuid4().hex}.part")  # `dest` may be a maximal-length name
    size = 0
    try:
        with await asyncio.to_thread(partial.open, "wb") as handle:
            async for chunk in content.iter_chunked(_DOWNLOAD_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise AttachmentError(too_large(max_bytes))
                await asyncio.to_thread(handle.write, chunk)
        await asyncio.to_thread(partial.replace, dest)
    finally:
        partial.unlink(missing_ok=True)


def too_large(max_bytes: int) -> str:
    return f"the file is larger than the {max_bytes / 1024**2:g} MB limit"
