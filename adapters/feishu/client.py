"""An async wrapper around lark-oapi's client: messages, reactions, CardKit cards, files.

lark-oapi's calls block (requests), and so does its tenant-token fetch, even inside its `a`-prefixed
coroutines (`verify()` fetches the token synchronously before awaiting anything). Every SDK call
therefore runs in this client's own thread pool. The SDK caches the tenant token itself
(`TokenManager`, keyed by app_id, renewed 10 minutes before expiry).

Failures become `FeishuApiError`. Rate limits (HTTP 429, codes 230020 / 11232 / 99991400) and
transient errors (5xx, network, non-JSON replies) are retried with backoff that honours
`x-ogw-ratelimit-reset`; sends to one chat are paced to Feishu's 5 messages per second.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import lark_oapi as lark
import requests
from lark_oapi.api.cardkit.v1 import (
    Card,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetMessageRequest,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token import TokenManager

from adapters.download import AttachmentError
from adapters.feishu.config import FeishuConfig

log = logging.getLogger(__name__)

# Feishu's "slow down" codes: message send frequency (230020), internal send flow control (11232)
# and the gateway's generic limit (99991400, usually with HTTP 429).
RATE_LIMIT_CODES = frozenset({230020, 11232, 99991400})
# The cached tenant token was rejected (expired early, app secret rotated): fetch a new one.
TOKEN_INVALID_CODES = frozenset({99991661, 99991663})

_TRANSIENT_ERRORS = (
    requests.RequestException,
    aiohttp.ClientError,
    asyncio.TimeoutError,
    json.JSONDecodeError,  # an HTML error page from a proxy instead of Feishu's JSON
    UnicodeDecodeError,
)
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
        self.op, self.code, self.msg, self.http_status, self.log_id = (
            op,
            code,
            msg,
            http_status,
            log_id,
        )
        detail = f"{op} failed: code={code} msg={msg!r}"
        if http_status is not None:
            detail += f" http={http_status}"
        if log_id:
            detail += f" log_id={log_id}"
        super().__init__(detail)


@dataclass(frozen=True)
class BotInfo:
    open_id: str
    name: str = ""


@dataclass(frozen=True)
class _Result:
    """One attempt's outcome, whichever transport made it."""

    code: int
    msg: str
    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names
    value: Any = None


class ChatPacer:
    """At most `rate` sends per second to one chat (a sliding window), in call order."""

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


class FeishuClient:
    """Async Feishu Open API client for the adapter (one per app)."""

    def __init__(
        self,
        config: FeishuConfig,
        *,
        max_attempts: int = 4,
        backoff_base_s: float = 0.5,
        max_backoff_s: float = 60.0,
        timeout_s: float = 30.0,
        workers: int = 8,
    ) -> None:
        self._config = config
        self._lark = (
            lark.Client.builder()
            .app_id(config.app_id)
            .app_secret(config.app_secret.get_secret_value())
            .domain(config.domain)
            .timeout(timeout_s)
            .log_level(lark.LogLevel.WARNING)
            .build()
        )
        self._max_attempts = max_attempts
        self._backoff_base_s = backoff_base_s
        self._max_backoff_s = max_backoff_s
        self._timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="feishu-api")
        self._pacer = ChatPacer(config.sends_per_second_per_chat)
        self._bot: BotInfo | None = None
        self._bot_lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        """Release the thread pool and the download session."""
        if self._http is not None:
            await self._http.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- bot -------------------------------------------------------------------------------

    async def bot_info(self) -> BotInfo:
        """The bot's identity, fetched once from /open-apis/bot/v3/info."""
        if self._bot is None:
            async with self._bot_lock:
                if self._bot is None:
                    self._bot = await self._fetch_bot_info()
        return self._bot

    async def bot_open_id(self) -> str:
        """The bot's open_id (tells its mention apart; drops its own messages)."""
        return (await self.bot_info()).open_id

    async def _fetch_bot_info(self) -> BotInfo:
        # lark-oapi has no typed bot/v3 API: a raw request keeps token handling in the SDK.
        def call() -> lark.BaseResponse:
            request = (
                lark.BaseRequest.builder()
                .http_method(lark.HttpMethod.GET)
                .uri("/open-apis/bot/v3/info")
                .token_types({lark.AccessTokenType.TENANT})
                .build()
            )
            return self._lark.request(request)

        response = await self._call("bot.info", self._sdk(call))
        bot = json.loads(response.raw.content).get("bot") or {}
        if not bot.get("open_id"):
            raise FeishuApiError(
                "bot.info", -1, "response has no bot.open_id (is the bot enabled?)"
            )
        return BotInfo(open_id=bot["open_id"], name=bot.get("app_name", ""))

    # --- messages ----------------------------------------------------------------------------

    async def send_message(
        self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str | None = None
    ) -> str:
        """Post a message to a chat; returns its message_id. Same `uuid` within 1 h → sent once."""

        def call() -> Any:
            body = (
                CreateMessageRequestBody.builder()
                .receive_id(chat_id)
                .msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False))
                .uuid(uuid)
                .build()
            )
            request = (
                CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
            )
            return self._lark.im.v1.message.create(request)

        response = await self._call("im.message.create", self._sdk(call), pace_key=chat_id)
        return response.data.message_id

    async def get_message(self, message_id: str) -> tuple[str, dict[str, Any]]:
        """A message's type and content (e.g. `("file", {"file_key": …, "file_name": …})`)."""

        def call() -> Any:
            return self._lark.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build())

        response = await self._call("im.message.get", self._sdk(call))
        items = response.data.items or []
        if not items:
            raise FeishuApiError("im.message.get", 230001, f"message {message_id} not found")
        item = items[0]
        try:
            content = json.loads(item.body.content if item.body is not None else "{}")
        except json.JSONDecodeError:
            content = {}
        return item.msg_type or "", content if isinstance(content, dict) else {}

    async def reply_message(
        self,
        message_id: str,
        msg_type: str,
        content: dict[str, Any],
        *,
        chat_id: str,
        reply_in_thread: bool = False,
        uuid: str | None = None,
    ) -> str:
        """Reply to a message (as a topic reply if `reply_in_thread`); returns the new message_id.

        `chat_id` is the message's chat, for pacing. Same `uuid` within 1 h → sent once.
        """

        def call() -> Any:
            body = (
                ReplyMessageRequestBody.builder()
                .msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False))
                .reply_in_thread(reply_in_thread)
                .uuid(uuid)
                .build()
            )
            request = (
                ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
            )
            return self._lark.im.v1.message.reply(request)

        response = await self._call("im.message.reply", self._sdk(call), pace_key=chat_id)
        return response.data.message_id

    async def add_reaction(self, message_id: str, emoji_type: str) -> str:
        """React to a message; returns the reaction_id."""

        def call() -> Any:
            body = (
                CreateMessageReactionRequestBody.builder()
                .reaction_type(Emoji.builder().emoji_type(emoji_type).build())
                .build()
            )
            request = (
                CreateMessageReactionRequest.builder()
                .message_id(message_id)
                .request_body(body)
                .build()
            )
            return self._lark.im.v1.message_reaction.create(request)

        response = await self._call("im.message_reaction.create", self._sdk(call))
        return response.data.reaction_id

    async def remove_reaction(self, message_id: str, reaction_id: str) -> None:
        """Remove a reaction the bot added."""

        def call() -> Any:
            request = (
                DeleteMessageReactionRequest.builder()
                .message_id(message_id)
                .reaction_id(reaction_id)
                .build()
            )
            return self._lark.im.v1.message_reaction.delete(request)

        await self._call("im.message_reaction.delete", self._sdk(call))

    # --- CardKit -----------------------------------------------------------------------------

    async def create_card(self, card: dict[str, Any]) -> str:
        """Create a card entity from card JSON 2.0; returns its card_id."""

        def call() -> Any:
            body = (
                CreateCardRequestBody.builder()
                .type("card_json")
                .data(json.dumps(card, ensure_ascii=False))
                .build()
            )
            return self._lark.cardkit.v1.card.create(
                CreateCardRequest.builder().request_body(body).build()
            )

        response = await self._call("cardkit.card.create", self._sdk(call))
        return response.data.card_id

    async def stream_card_text(
        self, card_id: str, element_id: str, text: str, sequence: int
    ) -> None:
        """Set a Markdown element's full text (typewriter effect in streaming mode).

        `sequence` must increase strictly per card; the uuid derived from it makes a retried
        request idempotent.
        """

        def call() -> Any:
            body = (
                ContentCardElementRequestBody.builder()
                .content(text)
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = (
                ContentCardElementRequest.builder()
                .card_id(card_id)
                .element_id(element_id)
                .request_body(body)
                .build()
            )
            return self._lark.cardkit.v1.card_element.content(request)

        await self._call("cardkit.card_element.content", self._sdk(call))

    async def set_card_streaming(self, card_id: str, streaming: bool, sequence: int) -> None:
        """Turn a card's streaming mode on or off."""

        def call() -> Any:
            settings = json.dumps({"config": {"streaming_mode": streaming}})
            body = (
                SettingsCardRequestBody.builder()
                .settings(settings)
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = SettingsCardRequest.builder().card_id(card_id).request_body(body).build()
            return self._lark.cardkit.v1.card.settings(request)

        await self._call("cardkit.card.settings", self._sdk(call))

    async def update_card(self, card_id: str, card: dict[str, Any], sequence: int) -> None:
        """Replace a card entity's whole content (works in and out of streaming mode)."""

        def call() -> Any:
            data = json.dumps(card, ensure_ascii=False)
            body = (
                UpdateCardRequestBody.builder()
                .card(Card.builder().type("card_json").data(data).build())
                .sequence(sequence)
                .uuid(f"{card_id}-{sequence}")
                .build()
            )
            request = UpdateCardRequest.builder().card_id(card_id).request_body(body).build()
            return self._lark.cardkit.v1.card.update(request)

        await self._call("cardkit.card.update", self._sdk(call))

    # --- files -------------------------------------------------------------------------------

    async def upload_image(self, path: Path) -> str:
        """Upload an image for sending in messages; returns its image_key."""

        def call() -> Any:
            # A fresh file object per attempt: the SDK consumes it into a multipart body.
            with path.open("rb") as image:
                body = CreateImageRequestBody.builder().image_type("message").image(image).build()
                request = CreateImageRequest.builder().request_body(body).build()
                return self._lark.im.v1.image.create(request)

        response = await self._call("im.image.create", self._sdk(call))
        return response.data.image_key

    async def upload_file(self, path: Path, file_type: str, file_name: str) -> str:
        """Upload a file (file_type: opus, mp4, pdf, doc, xls, ppt or stream); returns file_key."""

        def call() -> Any:
            with path.open("rb") as data:
                body = (
                    CreateFileRequestBody.builder()
                    .file_type(file_type)
                    .file_name(file_name)
                    .file(data)
                    .build()
                )
                return self._lark.im.v1.file.create(
                    CreateFileRequest.builder().request_body(body).build()
                )

        response = await self._call("im.file.create", self._sdk(call))
        return response.data.file_key

    async def download_resource(
        self, message_id: str, file_key: str, kind: str, dest: Path, *, max_bytes: int
    ) -> Path:
        """Download a message's image or file (`kind`: "image" or "file") to `dest`, atomically.

        Raises AttachmentError past `max_bytes`. The SDK's typed call buffers the whole body in
        memory, so this streams to disk itself, with the SDK's cached tenant token.
        """
        url = (
            f"{self._config.domain}/open-apis/im/v1/messages/{quote(message_id, safe='')}"
            f"/resources/{quote(file_key, safe='')}"
        )

        async def attempt() -> _Result:
            try:
                token = await self._in_thread(
                    lambda: TokenManager.get_self_tenant_token(self._lark.config)
                )
            except ObtainAccessTokenException as exc:
                return _token_failure(exc)
            headers = {"Authorization": f"Bearer {token}"}
            async with self._session().get(url, params={"type": kind}, headers=headers) as response:
                lower = {k.lower(): v for k, v in response.headers.items()}
                if response.status >= 400 or response.content_type == "application/json":
                    body = await response.json(content_type=None)
                    return _Result(
                        body.get("code", -1), body.get("msg", ""), response.status, lower
                    )
                if (response.content_length or 0) > max_bytes:
                    raise AttachmentError(_too_large(max_bytes))
                await _stream_to_file(response.content, dest, max_bytes)
                return _Result(0, "", response.status, lower, dest)

        return await self._call("im.message_resource.get", attempt)

    # --- plumbing ----------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_read=self._timeout_s)
            )
        return self._http

    async def _in_thread(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _sdk(self, fn: Callable[[], Any]) -> Callable[[], Awaitable[_Result]]:
        """An attempt that runs one blocking SDK call in the pool and reads its outcome."""

        async def attempt() -> _Result:
            try:
                response = await self._in_thread(fn)
            except ObtainAccessTokenException as exc:
                return _token_failure(exc)
            raw = response.raw
            return _Result(
                code=response.code if response.code is not None else -1,
                msg=response.msg or "",
                status=raw.status_code if raw is not None else None,
                headers={k.lower(): v for k, v in (raw.headers if raw is not None else {}).items()},
                value=response,
            )

        return attempt

    async def _call(
        self, op: str, attempt: Callable[[], Awaitable[_Result]], *, pace_key: str | None = None
    ) -> Any:
        """Run `attempt` until it succeeds, retrying rate limits and transient failures."""
        token_renewed = False
        for n in range(self._max_attempts):
            last = n == self._max_attempts - 1
            if pace_key is not None:
                await self._pacer.wait(pace_key)
            try:
                result = await attempt()
            except _TRANSIENT_ERRORS as exc:
                if last:
                    raise FeishuApiError(op, -1, f"{type(exc).__name__}: {exc}") from exc
                delay = self._backoff(n)
                log.warning("feishu %s: %s; retrying in %.1fs", op, type(exc).__name__, delay)
                await asyncio.sleep(delay)
                continue
            if result.code == 0 and (result.status is None or result.status < 400):
                return result.value
            error = FeishuApiError(
                op,
                result.code,
                result.msg,
                http_status=result.status,
                log_id=result.headers.get("x-tt-logid"),
            )
            if result.code in TOKEN_INVALID_CODES and not token_renewed:
                token_renewed = True
                self._forget_token()
                continue
            if result.status == 429 or result.code in RATE_LIMIT_CODES:
                delay = _retry_after(result.headers) or self._backoff(n)
            elif result.status is not None and result.status >= 500:
                delay = self._backoff(n)
            else:
                raise error
            if last:
                raise error
            log.warning(
                "feishu %s: code %s (http %s); retrying in %.1fs",
                op,
                result.code,
                result.status,
                delay,
            )
            await asyncio.sleep(min(delay, self._max_backoff_s))
        raise FeishuApiError(op, -1, "no attempt succeeded")

    def _backoff(self, attempt: int) -> float:
        return min(self._backoff_base_s * 2**attempt, self._max_backoff_s) * random.uniform(
            0.8, 1.2
        )

    def _forget_token(self) -> None:
        # The SDK's TokenManager has no invalidate call; expiring its entry (its own key format,
        # "self_tenant_token:<app_id>") makes the next call fetch a fresh token.
        TokenManager.cache.set(f"self_tenant_token:{self._config.app_id}", "", 0)


def _token_failure(exc: ObtainAccessTokenException) -> _Result:
    """A failed tenant-token fetch, classified like any other call (it may be rate limited)."""
    return _Result(exc.code if exc.code is not None else -1, f"tenant token: {exc.msg}")


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds Feishu asks to wait (x-ogw-ratelimit-reset, or a standard Retry-After)."""
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        try:
            return max(float(headers[name]), 0.0)
        except (KeyError, ValueError):
            continue
    return None


async def _stream_to_file(content: aiohttp.StreamReader, dest: Path, max_bytes: int) -> None:
    """Copy a response body to `dest` via a temporary file, aborting past `max_bytes`."""
    await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
    partial = dest.with_name(f".{uuid.uuid4().hex}.part")  # `dest` may be a maximal-length name
    size = 0
    try:
        with await asyncio.to_thread(partial.open, "wb") as handle:
            async for chunk in content.iter_chunked(_DOWNLOAD_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise AttachmentError(_too_large(max_bytes))
                await asyncio.to_thread(handle.write, chunk)
        await asyncio.to_thread(partial.replace, dest)
    finally:
        partial.unlink(missing_ok=True)


def _too_large(max_bytes: int) -> str:
    return f"the file is larger than the {max_bytes / 1024**2:g} MB limit"
