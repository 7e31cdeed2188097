"""Calls to the Anthropic Messages API, streamed, with usage and a clear failure mode.

The SDK retries 429/5xx/529 answers on its own. What it cannot retry is an error that arrives
inside a stream that already started (an SSE `error` event): we retry that call ourselves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic

from agent_core.context import is_context_overflow, overflow_sizes
from agent_core.messages import (
    ContentBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    new_id,
)

log = logging.getLogger(__name__)

_RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error"}

TextSink = Callable[[str], Awaitable[None]]


class ModelUnavailable(Exception):
    """The model could not answer after all retries; `ref_id` is quoted to the user and logged."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.ref_id = new_id()[:12]


class ContextOverflow(ModelUnavailable):
    """The request was longer than the model's context window."""

    def __init__(self, message: str, prompt_tokens: int | None, limit: int | None) -> None:
        super().__init__(message)
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

    async def complete(
        self,
        request: dict[str, Any],
        on_text: TextSink | None = None,
        on_restart: Callable[[], Awaitable[None]] | None = None,
        model: str | None = None,
    ) -> ModelResponse:
        """Stream one request; `on_text` receives text deltas, `on_restart` hears of a retry."""
        started = time.perf_counter()
        params = {"model": model or self.model, "max_tokens": self.max_tokens, **request}
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
                    raise ContextOverflow(str(exc), *overflow_sizes(exc)) from exc
                streamed_error = exc.status_code < 400 and _stream_error_type(exc) in _RETRYABLE_STREAM_ERRORS
                if streamed_error and attempt <= self._stream_retries:
                    log.warning("model stream failed (%s), retrying", _stream_error_type(exc))
                    await asyncio.sleep(self._retry_delay_s * attempt)
                    if on_restart is not None:
                        await on_restart()
                    continue
                raise ModelUnavailable(f"model error {exc.status_code}: {_stream_error_type(exc)}") from exc
            except (anthropic.APIConnectionError, anthropic.APITimeoutError) as exc:
                raise ModelUnavailable(f"model unreachable: {type(exc).__name__}") from exc
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
            duration_ms=(time.perf_counter() - started) * 1000,
            attempts=attempt,
        )
