"""Assembling a Messages API request from the stored conversation.

The order is fixed — tools, system prompt, messages — and nothing in the prefix changes from
turn to turn (no timestamps), so the prompt cache can hold it.
"""

from __future__ import annotations

from typing import Any

from agent_core.messages import StandardMessage


def append_api_message(merged: list[dict[str, Any]], message: StandardMessage) -> None:
    """Add `message` in API shape; consecutive messages of one role merge, as the API expects.

    The merged dict is replaced, never mutated: earlier requests may share it.
    """
    api = message.to_api()
    if merged and merged[-1]["role"] == api["role"]:
        merged[-1] = {"role": api["role"], "content": merged[-1]["content"] + api["content"]}
    else:
        merged.append(api)


def api_messages(history: list[StandardMessage]) -> list[dict[str, Any]]:
    """History in API shape (see `append_api_message`)."""
    merged: list[dict[str, Any]] = []
    for message in history:
        append_api_message(merged, message)
    return merged


def build_request(
    system_prompt: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]
) -> dict[str, Any]:
    """The request body (without model and max_tokens) for the next model call.

    `messages` is the conversation in API shape (the store keeps it, built incrementally).
    """
    request: dict[str, Any] = {"system": system_prompt, "messages": list(messages)}
    if tools:
        request["tools"] = tools
    return request
