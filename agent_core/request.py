"""Assembling a Messages API request from the stored conversation.

The order is fixed — tools, system prompt, messages — and nothing in the prefix changes from
turn to turn (no timestamps), so the prompt cache can hold it.
"""

from __future__ import annotations

from typing import Any

from agent_core.messages import StandardMessage


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
    request: dict[str, Any] = {"system": system_prompt, "messages": api_messages(history)}
    if tools:
        request["tools"] = tools
    return request
