# Over 600 lines: one fake Messages API (streaming, errors, scripts), kept whole so the protocol reads in one place.
"""A fake Anthropic Messages API for driving the real ``anthropic`` SDK in tests.

Script replies, then point the SDK at the fake::

    async with FakeAnthropic() as fake:
        fake.script(Reply([thinking("hmm"), tool_use("run_sql", {"q": "select 1"})]),
                    Reply([text("GMV dropped 4%.")]))
        client = AsyncAnthropic(base_url=fake.base_url, api_key="test")
        async with client.messages.stream(model=..., max_tokens=..., messages=...) as stream:
            message = await stream.get_final_message()

The wire format (SSE event names and payloads, the error envelope, ``request-id`` /
``retry-after`` / ``x-should-retry`` headers) follows what the SDK parses in
``anthropic/_streaming.py``, ``anthropic/lib/streaming/_messages.py`` and
``anthropic/_base_client.py``. Usage numbers, including prompt caching, are simulated
from request sizes so caching strategies can be benchmarked without the real API.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from . import FakeServer

__all__ = [
    "FakeAnthropic",
    "HttpError",
    "RecordedRequest",
    "Reply",
    "Responder",
    "Response",
    "StreamError",
    "estimate_tokens",
    "text",
    "thinking",
    "tool_use",
]

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn"]
Block = dict[str, Any]

# Real streams cut text into small deltas; 24 characters is close enough to exercise
# incremental rendering without flooding tests with events.
_TEXT_CHUNK_CHARS = 24
_JSON_CHUNKS = 3
# How far the real API looks back from a breakpoint for an earlier cached prefix.
_CACHE_LOOKBACK_BLOCKS = 20
_MAX_CACHE_BREAKPOINTS = 4
_CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}

_STATUS_FOR_ERROR_TYPE = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


# --------------------------------------------------------------------------- content blocks


def text(value: str) -> Block:
    """A ``text`` content block."""
    return {"type": "text", "text": value}


def thinking(value: str, signature: str = "sig") -> Block:
    """A ``thinking`` content block (streamed as thinking deltas plus one signature delta)."""
    return {"type": "thinking", "thinking": value, "signature": signature}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:  # API field names
    """A ``tool_use`` content block; ``id`` defaults to a fresh ``toolu_<hex>``."""
    return {
        "type": "tool_use",
        "id": id or f"toolu_{secrets.token_hex(12)}",
        "name": name,
        "input": input,
    }


# --------------------------------------------------------------------------- scripted responses


@dataclass
class Reply:
    """A successful message, streamed or returned as JSON depending on the request.

    ``stop_reason`` defaults to ``"tool_use"`` when a block is a tool call, else ``"end_turn"``.
    ``usage`` entries override the simulated ones (e.g. ``{"output_tokens": 7}``).
    ``event_delay`` sleeps between SSE events, for tests of incremental rendering.
    """

    blocks: list[Block]
    stop_reason: StopReason | None = None
    usage: dict[str, Any] | None = None
    event_delay: float = 0.0

    @property
    def effective_stop_reason(self) -> StopReason:
        """The stop reason sent on the wire."""
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.blocks) else "end_turn"


@dataclass
class HttpError:
    """An HTTP error with the API's JSON error envelope.

    The SDK retries 408/409/429/5xx itself; ``should_retry`` sets ``x-should-retry`` to
    override that, and ``retry_after`` (seconds) sets ``retry-after``, which the SDK
    obeys instead of its exponential backoff.
    """

    status: int = 529
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    retry_after: float | None = None
    should_retry: bool | None = None


@dataclass
class StreamError:
    """HTTP 200 SSE that starts a message, streams ``blocks`` and then sends ``event: error``.

    This is how the real API reports overloads after streaming has begun; the SDK
    raises ``APIStatusError`` from the stream. A non-streaming request gets the same
    error as a plain HTTP error instead.
    """

    blocks: list[Block] = field(default_factory=list)
    error_type: str = "overloaded_error"
    message: str = "Overloaded"
    event_delay: float = 0.0


Response = Reply | HttpError | StreamError
Responder = Callable[[dict[str, Any]], Response | Awaitable[Response]]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake received: parsed JSON body and headers (lower-case names)."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def api_key(self) -> str | None:
        """The key the client sent (SDK v2 sends a Bearer token, older ones ``x-api-key``)."""
        authorization = self.headers.get("authorization", "")
        return (
            authorization.removeprefix("Bearer ")
            if authorization
            else self.headers.get("x-api-key")
        )


# --------------------------------------------------------------------------- token/cache simulation


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class _Unit:
    """One cacheable block of a request: a tool, a system block or a message content block."""

    canonical: str
    cache_control: dict[str, Any] | None


def _request_units(body: dict[str, Any]) -> list[_Unit]:
    """Flatten a request into blocks in the API's caching order: tools, system, messages."""
    raw: list[dict[str, Any]] = list(body.get("tools") or [])
    system = body.get("system")
    if isinstance(system, str):
        raw.append({"type": "text", "text": system})
    elif isinstance(system, list):
        raw.extend(system)
    for message in body.get("messages") or []:
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        raw.extend({"role": message.get("role"), **block} for block in blocks)

    units = []
    for block in raw:
        # The marker is not content: moving a breakpoint must not change the prefix hash.
        content = {k: v for k, v in block.items() if k != "cache_control"}
        units.append(_Unit(_canonical(content), block.get("cache_control")))
    if units and body.get("cache_control"):
        # Top-level cache_control marks the last cacheable block.
        units[-1] = _Unit(units[-1].canonical, body["cache_control"])
    return units


def estimate_tokens(body: dict[str, Any]) -> int:
    """Input-token estimate: canonical-JSON characters / 4 over tools, system and messages."""
    return sum(len(unit.canonical) for unit in _request_units(body)) // 4


class _PromptCache:
    """Simulates the API's prompt cache.

    Each ``cache_control`` breakpoint writes the prefix ending at it. A request reads the
    longest live prefix found at one of its breakpoints or up to 20 blocks before one;
    tokens from there to the last breakpoint are cache writes, the rest plain input.
    """

    def __init__(self, clock: Callable[[], float], min_cacheable_tokens: int) -> None:
        self._clock = clock
        self._min_tokens = min_cacheable_tokens
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        """Input-side usage for ``body``, updating the cache as the real API would."""
        units = _request_units(body)
        hasher = hashlib.sha256(str(body.get("model")).encode())  # caches are per model
        hashes: list[str] = []
        prefix_tokens: list[int] = []
        chars = 0
        for unit in units:
            hasher.update(unit.canonical.encode())
            hashes.append(hasher.hexdigest())
            chars += len(unit.canonical)
            prefix_tokens.append(chars // 4)
        total = chars // 4
        # Prefixes shorter than the model minimum are silently not cached.
        breakpoints = [
            i
            for i, unit in enumerate(units)
            if unit.cache_control and prefix_tokens[i] >= self._min_tokens
        ]

        with self._lock:
            now = self._clock()
            read_end = -1
            for bp in breakpoints:
                for i in range(bp, max(-1, bp - _CACHE_LOOKBACK_BLOCKS - 1), -1):
                    if self._expiry.get(hashes[i], 0.0) > now:
                        read_end = max(read_end, i)
                        break
            created = {"5m": 0, "1h": 0}
            covered = prefix_tokens[read_end] if read_end >= 0 else 0
            for bp in breakpoints:
                ttl = (units[bp].cache_control or {}).get("ttl", "5m")
                ttl = ttl if ttl in _CACHE_TTL_SECONDS else "5m"
                if bp > read_end:
                    created[ttl] += prefix_tokens[bp] - covered
                    covered = prefix_tokens[bp]
                # Writing (or reading) a prefix refreshes its lifetime.
                self._expiry[hashes[bp]] = max(
                    self._expiry.get(hashes[bp], 0.0), now + _CACHE_TTL_SECONDS[ttl]
                )
            if read_end >= 0:
                self._expiry[hashes[read_end]] = max(
                    self._expiry[hashes[read_end]], now + _CACHE_TTL_SECONDS["5m"]
                )

        cache_read = prefix_tokens[read_end] if read_end >= 0 else 0
        cache_creation = created["5m"] + created["1h"]
        return {
            "input_tokens": total - cache_read - cache_creation,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": created["5m"],
                "ephemeral_1h_input_tokens": created["1h"],
            },
        }


# --------------------------------------------------------------------------- request validation


def _tool_use_ids(message: dict[str, Any] | None) -> list[str]:
    if (
        not message
        or message.get("role") != "assistant"
        or not isinstance(message.get("content"), list)
    ):
        return []
    return [b["id"] for b in message["content"] if b.get("type") == "tool_use"]


def _validation_error(body: dict[str, Any]) -> str | None:
    """The API's 400 message for the mistakes an agent loop is likely to make, else None."""
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            return f"{key}: Field required"
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    found = sum(1 for unit in _request_units(body) if unit.cache_control)
    if found > _MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )

    for i, message in enumerate(messages):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "user":
            expected = _tool_use_ids(messages[i - 1] if i else None)
            for j, block in enumerate(blocks):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in expected:
                    return (
                        f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                        f"`tool_result` blocks: {block.get('tool_use_id')}. Each `tool_result` "
                        "block must have a corresponding `tool_use` block in the previous message."
                    )
        ids = _tool_use_ids(message)
        if ids and i + 1 < len(messages):
            following = messages[i + 1].get("content")
            answered = (
                {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
                if isinstance(following, list)
                else set()
            )
            missing = [tool_id for tool_id in ids if tool_id not in answered]
            if missing:
                return (
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
    return None


# --------------------------------------------------------------------------- wire encoding


def _chunks(value: str, count: int | None = None) -> list[str]:
    """Split ``value`` into ``count`` pieces, or pieces of ``_TEXT_CHUNK_CHARS``; never empty."""
    if not value:
        return [""]
    size = -(-len(value) // count) if count else _TEXT_CHUNK_CHARS
    return [value[i : i + size] for i in range(0, len(value), size)]


def _block_events(index: int, block: Block) -> Iterator[tuple[str, dict[str, Any]]]:
    """SSE ``(event, data)`` pairs that stream one content block."""
    kind = block.get("type")
    if kind == "text":
        start: Block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _chunks(block["text"])]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": piece} for piece in _chunks(block["thinking"])
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "tool_use":
        start = {**block, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in _chunks(json.dumps(block["input"]), _JSON_CHUNKS)
        ]
    else:
        # redacted_thinking, server tool results, ...: the API sends them whole.
        start, deltas = block, []
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": start},
    )
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def _error_envelope(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


# --------------------------------------------------------------------------- the server


class FakeAnthropic(FakeServer):
    """Fake ``POST /v1/messages`` (streaming and not), ``POST /v1/messages/count_tokens`` and
    the Models API (``GET /v1/models``, ``GET /v1/models/{model_id}``).

    Responses come from the :meth:`script` FIFO, then from the :meth:`respond_with`
    callable; with neither the fake answers HTTP 500 (``x-should-retry: false``, so the
    SDK fails fast). Malformed conversations (missing fields, unpaired ``tool_use`` /
    ``tool_result``, more than 4 cache breakpoints) get the API's 400 error.

    ``clock`` drives prompt-cache expiry (advance it to test TTLs);
    ``min_cacheable_tokens`` mimics the model minimum below which nothing is cached.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        min_cacheable_tokens: int = 0,
        api_keys: set[str] | None = None,
        models: set[str] | None = None,
    ) -> None:
        super().__init__()
        # As the real API: a key not in `api_keys` gets 401 authentication_error and a model
        # not in `models` 404 not_found_error, on every endpoint (None: any is accepted).
        self.api_keys = api_keys
        self.models = models
        self.model_requests: list[RecordedRequest] = []  # GET /v1/models[/{id}]
        self.requests: list[RecordedRequest] = []
        self.count_tokens_requests: list[RecordedRequest] = []
        self._queue: deque[Response] = deque()
        self._responder: Responder | None = None
        self._cache = _PromptCache(clock, min_cacheable_tokens)

    @property
    def base_url(self) -> str:
        """Pass as ``AsyncAnthropic(base_url=...)``; the SDK appends ``/v1/messages``."""
        return self.root_url

    # ----------------------------------------------------------------- scripting and inspection

    def script(self, *responses: Response) -> None:
        """Queue responses, served first-in first-out, one per ``/v1/messages`` request."""
        self._queue.extend(responses)

    def respond_with(self, fn: Responder | None) -> None:
        """Answer with ``fn(request_json)`` (sync or async) whenever the script queue is empty."""
        self._responder = fn

    @property
    def queued(self) -> int:
        """How many scripted responses have not been served yet."""
        return len(self._queue)

    @property
    def last_request(self) -> RecordedRequest:
        """The most recent ``/v1/messages`` request."""
        if not self.requests:
            raise AssertionError("FakeAnthropic has received no /v1/messages request")
        return self.requests[-1]

    async def wait_for_requests(self, n: int, timeout: float = 5) -> list[RecordedRequest]:
        """Wait until at least ``n`` ``/v1/messages`` requests arrived; return them."""
        await self._wait_until(
            lambda: len(self.requests) >= n, timeout, f"{n} Anthropic request(s)"
        )
        return list(self.requests)

    def wait_for_requests_sync(self, n: int, timeout: float = 5) -> list[RecordedRequest]:
        """Blocking :meth:`wait_for_requests`, for sync tests using :meth:`in_thread`."""
        self._wait_until_sync(lambda: len(self.requests) >= n, timeout, f"{n} Anthropic request(s)")
        return list(self.requests)

    # ----------------------------------------------------------------- HTTP

    def _routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/messages", self._messages),
            web.post("/v1/messages/count_tokens", self._count_tokens),
            web.get("/v1/models", self._list_models),
            web.get("/v1/models/{model_id}", self._retrieve_model),
        ]

    def _rejection(self, recorded: RecordedRequest, model: Any) -> web.Response | None:
        """The API's 401 for an unknown key, then its 404 for an unknown model."""
        if self.api_keys is not None and recorded.api_key not in self.api_keys:
            return self._error(HttpError(401, "authentication_error", "invalid x-api-key", should_retry=False))
        if self.models is not None and model is not None and model not in self.models:
            return self._error(HttpError(404, "not_found_error", f"model: {model}", should_retry=False))
        return None

    @staticmethod
    def _model_object(model_id: str) -> dict[str, Any]:
        return {"type": "model", "id": model_id, "display_name": model_id, "created_at": "2025-05-14T00:00:00Z"}

    async def _retrieve_model(self, request: web.Request) -> web.StreamResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = RecordedRequest(path=request.path, body={}, headers=headers)
        self.model_requests.append(recorded)
        model_id = request.match_info["model_id"]
        if (rejected := self._rejection(recorded, model_id)) is not None:
            return rejected
        return web.json_response(self._model_object(model_id), headers=self._id_header())

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        recorded = RecordedRequest(path=request.path, body={}, headers=headers)
        self.model_requests.append(recorded)
        if (rejected := self._rejection(recorded, None)) is not None:
            return rejected
        data = [self._model_object(m) for m in sorted(self.models or ())]
        page = {"data": data, "has_more": False, "first_id": None, "last_id": None}
        if data:
            page.update(first_id=data[0]["id"], last_id=data[-1]["id"])
        return web.json_response(page, headers=self._id_header())

    async def _read(self, request: web.Request) -> RecordedRequest | web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return self._error(HttpError(400, "invalid_request_error", f"Invalid JSON body: {exc}"))
        headers = {k.lower(): v for k, v in request.headers.items()}
        return RecordedRequest(path=request.path, body=body, headers=headers)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._read(request)
        if isinstance(recorded, web.Response):
            return recorded
        self.count_tokens_requests.append(recorded)
        return web.json_response(
            {"input_tokens": estimate_tokens(recorded.body)}, headers=self._id_header()
        )

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._read(request)
        if isinstance(recorded, web.Response):
            return recorded
        self.requests.append(recorded)
        body = recorded.body
        if (rejected := self._rejection(recorded, body.get("model"))) is not None:
            return rejected
        if problem := _validation_error(body):
            return self._error(HttpError(400, "invalid_request_error", problem, should_retry=False))

        response = await self._next_response(body)
        streaming = bool(body.get("stream"))
        if isinstance(response, HttpError):
            return self._error(response)
        if isinstance(response, StreamError) and not streaming:
            status = _STATUS_FOR_ERROR_TYPE.get(response.error_type, 500)
            return self._error(HttpError(status, response.error_type, response.message))

        message = self._message(body, response)
        if not streaming:
            return web.json_response(message, headers=self._id_header())
        return await self._stream(request, message, response)

    async def _next_response(self, body: dict[str, Any]) -> Response:
        if self._queue:
            return self._queue.popleft()
        if self._responder is None:
            message = "FakeAnthropic has no scripted response (queue empty, no respond_with)"
            return HttpError(500, "api_error", message, should_retry=False)
        try:
            result = self._responder(body)
            return await result if inspect.isawaitable(result) else result
        except Exception as exc:  # surface test bugs as a non-retried API error, not a hang
            return HttpError(
                500, "api_error", f"FakeAnthropic respond_with raised {exc!r}", should_retry=False
            )

    def _message(self, body: dict[str, Any], response: Reply | StreamError) -> dict[str, Any]:
        usage: dict[str, Any] = {
            **self._cache.usage(body),
            "output_tokens": max(1, len(_canonical(response.blocks)) // 4),
            "service_tier": "standard",
        }
        stop_reason = None
        if isinstance(response, Reply):
            usage.update(response.usage or {})
            stop_reason = response.effective_stop_reason
        return {
            "id": f"msg_{secrets.token_hex(12)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": response.blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    async def _stream(
        self, request: web.Request, message: dict[str, Any], response: Reply | StreamError
    ) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        headers.update(self._id_header())
        stream = web.StreamResponse(status=200, headers=headers)
        await stream.prepare(request)

        async def send(event: str, data: dict[str, Any]) -> None:
            await stream.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
            if response.event_delay:
                await asyncio.sleep(response.event_delay)

        usage = message["usage"]
        start_usage = {**usage, "output_tokens": 1}
        await send(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "usage": start_usage,
                },
            },
        )
        for index, block in enumerate(message["content"]):
            for event, data in _block_events(index, block):
                await send(event, data)
            if index == 0:
                await send("ping", {"type": "ping"})  # the API pings early in every stream

        if isinstance(response, StreamError):
            await send(
                "error",
                _error_envelope(response.error_type, response.message, headers["request-id"]),
            )
        else:
            delta_usage = {
                key: usage[key]
                for key in (
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                    "output_tokens",
                )
            }
            await send(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": delta_usage,
                },
            )
            await send("message_stop", {"type": "message_stop"})
        await stream.write_eof()
        return stream

    @staticmethod
    def _id_header() -> dict[str, str]:
        return {"request-id": f"req_{secrets.token_hex(12)}"}

    def _error(self, error: HttpError) -> web.Response:
        headers = self._id_header()
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        if error.should_retry is not None:
            headers["x-should-retry"] = "true" if error.should_retry else "false"
        return web.json_response(
            _error_envelope(error.error_type, error.message, headers["request-id"]),
            status=error.status,
            headers=headers,
        )
