"""The model request as a typed object, and the stored conversation in API shape.

The loop builds a `ModelRequest` from the stored conversation; each hook returns a changed
copy (`dataclasses.replace`), in the order `agent_core.hooks` documents; the Anthropic request
body is produced once, at the edge, by `agent_core.model.api_body`. So hooks agree on one
shape: the system prompt is always a tuple of blocks, cache breakpoints and the refocus
reminder are flags the edge renders, never bytes a later hook must parse back.

The order on the wire is fixed -- tools, system prompt, messages -- and nothing in the prefix
changes from turn to turn (no timestamps), so the prompt cache can hold it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_core.messages import StandardMessage


@dataclass(frozen=True)
class SystemBlock:
    text: str
    cached: bool = False  # a prompt-cache breakpoint after this block


@dataclass(frozen=True)
class ModelRequest:
    """One model call: what the model reads, and the settings it is read with.

    ``messages`` are the conversation in API shape; the dicts are shared with the store's
    cache and earlier requests, so a hook replaces the list and never mutates a message.
    """

    system: tuple[SystemBlock, ...]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    model: str | None = None  # None: the client's model
    # Appended to the newest (user) message as a text block, for this request only.
    reminder: str | None = None
    cache_messages: bool = False  # a cache breakpoint on the newest message


def build_request(system_prompt: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]]) -> ModelRequest:
    """The request for the next model call, before the hooks.

    `messages` is the conversation in API shape (the store keeps it, built incrementally).
    """
    return ModelRequest(system=(SystemBlock(system_prompt),), messages=list(messages), tools=tools)


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
