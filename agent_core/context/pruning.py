"""Pruning: older large tool results are sent as placeholders, long tool inputs shortened.

Below ``ContextState.pruned_before`` a message is sent with large tool results replaced by a
short placeholder naming the data file (the complete data), and long tool inputs cut. The
mark only moves forward and rendering is deterministic, so the bytes sent for old messages
only change when a mark moves (the prompt cache holds them until then).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent_core.config import CompressionConfig
from agent_core.messages import (
    RedactedThinkingBlock,
    StandardMessage,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agent_core.state import ContextState

_FILE_REF = re.compile(r"/(?:data|charts|reports|uploads)/[^\s)\]\"'`,;]+")


def _has_thinking(message: StandardMessage) -> bool:
    return any(isinstance(b, ThinkingBlock | RedactedThinkingBlock) for b in message.content)


def _prunable_result(block: ToolResultBlock, config: CompressionConfig) -> bool:
    # Errors are kept whole: what went wrong must stay visible until it is summarized.
    return not block.is_error and len(block.content) >= config.prune_min_chars


def is_prunable(message: StandardMessage, config: CompressionConfig) -> bool:
    """Whether pruning would change how `message` is sent."""
    if any(_prunable_result(b, config) for b in message.tool_results()):
        return True
    # Assistant turns with thinking are left intact: their blocks are signed as a whole.
    return not _has_thinking(message) and any(
        _longest_string(call.input) > config.prune_input_chars for call in message.tool_uses()
    )


def prune_mark(
    history: Sequence[StandardMessage], state: ContextState, upto: int, config: CompressionConfig
) -> int:
    """The new ``pruned_before`` for pruning everything before `upto`: unchanged if moving it
    would change no bytes (so the cached prefix is not invalidated for nothing)."""
    start = max(state.pruned_before, state.summary_through)
    if upto > start and any(is_prunable(history[i], config) for i in range(start, upto)):
        return upto
    return state.pruned_before


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest_string(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    return 0


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}… [{len(value) - limit:,} characters shortened]"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def pruned_placeholder(tool: str, content: str) -> str:
    """What an old large tool result is sent as: its size, its data files and first lines."""
    files = sorted(set(_FILE_REF.findall(content)))
    where = f"Complete data: {', '.join(files)}." if files else "Run the call again if you need its details."
    head = "\n".join(content[:400].splitlines()[:5])
    return (
        f"[Older result of {tool}, pruned from the context to save space "
        f"({len(content):,} characters). {where} It began:\n{head}\n…]"
    )


class ContextRenderer:
    """Renders what is sent for the stored history under a `ContextState`.

    Deterministic: the same history and state always give the same bytes. Pruned renderings
    are cached by message id (stored messages never change).
    """

    def __init__(self, config: CompressionConfig, cache_size: int = 20_000) -> None:
        self.config = config
        self._pruned: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cache_size = cache_size

    def pruned(self, message: StandardMessage, previous: StandardMessage | None) -> dict[str, Any]:
        """`message` in API shape with large results and long inputs cut down."""
        if not is_prunable(message, self.config):
            return message.to_api()
        cached = self._pruned.get(message.id)
        if cached is None:
            names = {c.id: c.name for c in previous.tool_uses()} if previous else {}
            cached = {
                "role": message.role.value,
                "content": [self._block(b, names, message) for b in message.content],
            }
            self._pruned[message.id] = cached
            while len(self._pruned) > self._cache_size:
                self._pruned.popitem(last=False)
        return cached

    def _block(self, block: Any, names: dict[str, str], message: StandardMessage) -> dict[str, Any]:
        if isinstance(block, ToolResultBlock) and _prunable_result(block, self.config):
            tool = names.get(block.tool_use_id, "a tool")
            content = pruned_placeholder(tool, block.content)
            return {**block.model_dump(), "content": content}
        if isinstance(block, ToolUseBlock) and not _has_thinking(message):
            return {**block.model_dump(), "input": _shorten(block.input, self.config.prune_input_chars)}
        return block.model_dump()

    def rendered(self, history: Sequence[StandardMessage], state: ContextState, index: int) -> dict[str, Any]:
        """How ``history[index]`` is sent under `state` (pruned or verbatim)."""
        message = history[index]
        if index < state.pruned_before:
            return self.pruned(message, history[index - 1] if index else None)
        return message.to_api()

    def messages(self, history: Sequence[StandardMessage], state: ContextState) -> list[dict[str, Any]]:
        """The request's messages: the summary, then the rest, merged by role as the API wants."""
        merged: list[dict[str, Any]] = []
        if state.summary:
            merged.append({"role": "user", "content": [{"type": "text", "text": state.summary}]})
        for index in range(state.summary_through, len(history)):
            api = self.rendered(history, state, index)
            if merged and merged[-1]["role"] == api["role"]:
                merged[-1] = {"role": api["role"], "content": merged[-1]["content"] + api["content"]}
            else:
                merged.append(api)
        return merged
