"""Upgrading stored message content written by older schema versions, on read.

Rows are never rewritten in place (the history is append-only); each reader upgrades what it
loads, one version step at a time.

- v1 → v2: a tool_result's `content` could be stored as the API's list of text blocks; v2 keeps
  one string (what our tools produce), so the list is joined.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent_core.messages import SCHEMA_VERSION

Blocks = list[dict[str, Any]]


def _v1_to_v2(blocks: Blocks) -> Blocks:
    upgraded = []
    for block in blocks:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            text = "\n".join(part.get("text", "") for part in block["content"] if part.get("type") == "text")
            block = {**block, "content": text}
        upgraded.append(block)
    return upgraded


_UPGRADES: dict[int, Callable[[Blocks], Blocks]] = {1: _v1_to_v2}


class UnknownSchemaVersion(ValueError):
    """A row from a newer (or corrupt) schema this code cannot read."""


def upgrade_blocks(blocks: Blocks, version: int) -> Blocks:
    """`blocks` as the current schema version stores them."""
    if not 1 <= version <= SCHEMA_VERSION:
        raise UnknownSchemaVersion(f"message schema version {version} (this code reads 1..{SCHEMA_VERSION})")
    while version < SCHEMA_VERSION:
        blocks = _UPGRADES[version](blocks)
        version += 1
    return blocks
