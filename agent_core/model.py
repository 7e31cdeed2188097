"""Calls to the Anthropic Messages API, streamed, with usage and a clear failure mode.

This is the edge: the typed `ModelRequest` the hooks shaped becomes the API's request body
here (`api_body`), and the API's answers and errors become typed results here.

The SDK retries 429/5xx/529 answers on its own. What it cannot retry is an error that arrives
inside a stream that already started (an SSE `error` event): we retry that call ourselves.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic

from agent_core.messages import (
    ContentBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    new_id,
)
from agent_core.model_errors import ModelErrorKind, error_kind
from agent_core.request import ModelRequest, SystemBlock
from agent_core.retry import backoff_delay_s

log = logging.getLogger(__name__)

_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error"}
_TOO_LONG = re.compile(r"prompt is too long|input is too long|exceeds? the (maximum )?context", re.I)
_TOKENS = re.compile(r"(\d[\d,]*)\s*tokens\s*>\s*(\d[\d,]*)")
EPHEMERAL = {"type": "ephemeral"}

TextSink = Callable[[str], Awaitable[None]]


class ModelUnavailable(Exception):
    """The model could not answer after all retries; `ref_id` is quoted to the user and logged.

    `kind` says why; `model` and `duration_ms` describe the failed call (for the call record).
    """

    def __init__(
        self, message: str, kind: ModelErrorKind = ModelErrorKind.UNREACHABLE, model: str = "", duration_ms: float = 0.0
    ) -> None:
        super().__init__(message)
        self.ref_id = new_id()[:12]
        self.kind = kind
        self.model = model
        self.duration_ms = duration_ms


class ContextOverflow(ModelUnavailable):
    """The request was longer than the model's context window."""

    def __init__(self, message: str, prompt_tokens: int | None, limit: int | None) -> None:
        super().__init__(message, ModelErrorKind.CONTEXT_OVERFLOW)
        self.prompt_tokens = prompt_tokens
        self.limit = limit


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """Everything the model read for this request."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass
class ModelResponse:
    content: list[ContentBlock]
    stop_reason: str | None
    model: str
    usage: Usage = field(default_factory=Usage)
    duration_ms: float = 0.0
    attempts: int = 1


def api_system(blocks: tuple[SystemBlock, ...]) -> str | list[dict[str, Any]]:
    """The system prompt in API shape: a plain string while it is one block without a cache
    breakpoint, else a list of text blocks."""
    if len(blocks) == 1 and not blocks[0].cached:
        return blocks[0].text
    return [
        {"type": "text", "text": b.text, "cache_control": EPHEMERAL} if b.cached else {"type": "text", "text": b.text}
        for b in blocks
    ]


def api_prefix(request: ModelRequest) -> dict[str, Any]:
    """The request's cached prefix in API shape: system prompt and tools (for estimates)."""
    prefix: dict[str, Any] = {"system": api_system(request.system)}
    if request.tools:
        prefix["tools"] = request.tools
    return prefix


def _marked_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's messages in API shape, with the reminder and cache breakpoints placed.

    Only the newest message is copied (shallowly, block by block): the others are shared,
    cached renderings. A reminder gets a breakpoint on the block before it, so the next
    request reads the cache written without the reminder.
    """
    messages = request.messages
    if not messages or (request.reminder is None and not request.cache_messages):
        return messages
    last = messages[-1]
    content = [dict(block) for block in last["content"]]
    if request.reminder is not None:
        if content:
            content[-1]["cache_control"] = EPHEMERAL
        content.append({"type": "text", "text": request.reminder})
    if request.cache_messages and content:
        content[-1]["cache_control"] = EPHEMERAL
    return [*messages[:-1], {**last, "content": content}]


def api_body(request: ModelRequest, model: str, max_tokens: int) -> dict[str, Any]:
    """The Messages API request body for `request` (`model` unless the request names one)."""
    return {
        "model": request.model or model,
        "max_tokens": max_tokens,
        **api_prefix(request),
        "messages": _marked_messages(request),
    }


def _error_fields(exc: anthropic.APIStatusError) -> tuple[str | None, str]:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return error.get("type"), str(error.get("message", ""))
    return None, str(exc)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether `exc` is the API's "prompt is too long" rejection (HTTP 400 invalid_request_error).

    Only this error is worth a compress-and-retry; every other 400 is a bug to surface.
    """
    if not isinstance(exc, anthropic.APIStatusError) or exc.status_code != 400:
        return False
    error_type, message = _error_fields(exc)
    return error_type == "invalid_request_error" and bool(_TOO_LONG.search(message))


def overflow_sizes(exc: anthropic.APIStatusError) -> tuple[int | None, int | None]:
    """The prompt size and the limit the API reported in a context-overflow error, if it said
    ("prompt is too long: 208310 tokens > 200000 maximum")."""
    match = _TOKENS.search(_error_fields(exc)[1])
    if not match:
        return None, None
    return int(match[1].replace(",", "")), int(match[2].replace(",", ""))


def _stream_error_type(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"].get("type")
    return None


def _convert_block(block: Any) -> ContentBlock | None:
    if block.type == "text":
        return TextBlock(text=block.text)
    if block.type == "thinking":
        return ThinkingBlock(thinking=block.thinking, signature=block.signature)
    if block.type == "redacted_thinking":
        return RedactedThinkingBlock(data=block.data)
    if block.type == "tool_use":
        return ToolUseBlock(id=block.id, name=block.name, input=dict(block.input or {}))
    log.warning("ignoring unsupported content block type %s", block.type)
    return None


class ModelClient:
    """A thin, typed layer over `AsyncAnthropic.messages.stream`."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        model: str,
        max_tokens: int,
        stream_retries: int = 1,
        retry_delay_s: float = 1.0,
    ) -> None:
        self._client = client
        self.model = model
        self.max_tokens = max_tokens
        self._stream_retries = stream_retries
        self._retry_delay_s = retry_delay_s

    @property
    def timeout_s(self) -> object:
        """The SDK client's timeout per request (`BA_MODEL_TIMEOUT`)."""
        return self._client.timeout

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections; an unclosed client warns from a closed event loop."""
        await self._client.close()

    async def complete(
        self,
        request: ModelRequest,
        on_text: TextSink | None = None,
        on_restart: Callable[[], Awaitable[None]] | None = None,
    ) -> ModelResponse:
        """Stream one request; `on_text` receives text deltas, `on_restart` hears of a retry."""
        started = time.perf_counter()
        params = api_body(request, self.model, self.max_tokens)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._client.messages.stream(**params) as stream:
                    if on_text is not None:
                        async for text in stream.text_stream:
                            await on_text(text)
                    final = await stream.get_final_message()
                break
            except anthropic.APIStatusError as exc:
                if is_context_overflow(exc):
                    overflow = ContextOverflow(str(exc), *overflow_sizes(exc))
                    overflow.model, overflow.duration_ms = params["model"], _ms_since(started)
                    raise overflow from exc
                streamed_error = exc.status_code < 400 and _stream_error_type(exc) in _RETRYABLE_STREAM_ERRORS
                if streamed_error and attempt <= self._stream_retries:
                    log.warning("model stream failed (%s), retrying", _stream_error_type(exc))
                    await asyncio.sleep(backoff_delay_s(attempt - 1, first_s=self._retry_delay_s, max_s=30.0))
                    if on_restart is not None:
                        await on_restart()
                    continue
                # An error inside a started stream comes with status 200: its type decides.
                status = exc.status_code
                if status < 400:
                    status = 529 if _stream_error_type(exc) in (*_RETRYABLE_STREAM_ERRORS, "rate_limit_error") else 400
                raise ModelUnavailable(
                    f"model error {exc.status_code}: {_stream_error_type(exc)}",
                    error_kind(status),
                    params["model"],
                    _ms_since(started),
                ) from exc
            except (anthropic.APIConnectionError, anthropic.APITimeoutError) as exc:
                raise ModelUnavailable(
                    f"model unreachable: {type(exc).__name__}", ModelErrorKind.UNREACHABLE, params["model"], _ms_since(started)
                ) from exc
        usage = final.usage
        content = [b for b in (_convert_block(block) for block in final.content) if b is not None]
        return ModelResponse(
            content=content,
            stop_reason=final.stop_reason,
            model=final.model,
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_read_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
                cache_write_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
            ),
            duration_ms=_ms_since(started),
            attempts=attempt,
        )


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
