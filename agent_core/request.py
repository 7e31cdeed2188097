"""Assembling a Messages API request from the stored conversation.

The prefix (tools, system prompt) is byte-stable across turns so the prompt cache holds; a cache
breakpoint on the last message lets the next call read the whole conversation so far from cache.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_core.messages import StandardMessage

_EPHEMERAL = {"type": "ephemeral"}


def api_messages(history: list[StandardMessage]) -> list[dict[str, Any]]:
    """History in API shape; consecutive messages of one role are merged, as the API expects."""
    merged: list[dict[str, Any]] = []
    for message in history:
        api = message.to_api()
        if merged and merged[-1]["role"] == api["role"]:
            merged[-1] = {"role": api["role"], "content": merged[-1]["content"] + api["content"]}
        else:
            merged.append(api)
    return merged


def build_request(
    system_prompt: str, tools: list[dict[str, Any]], history: list[StandardMessage]
) -> dict[str, Any]:
    """The request body (without model and max_tokens) for the next model call."""
    messages = api_messages(history)
    if messages:
        # Copy only the last message: earlier dicts are shared, cached renderings.
        last = copy.deepcopy(messages[-1])
        if last["content"]:
            last["content"][-1]["cache_control"] = _EPHEMERAL
        messages[-1] = last
    request: dict[str, Any] = {
        "system": [{"type": "text", "text": system_prompt, "cache_control": _EPHEMERAL}],
        "messages": messages,
    }
    if tools:
        request["tools"] = tools
    return request
