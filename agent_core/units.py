"""Quantities written for people: the one place sizes are formatted for messages."""

from __future__ import annotations


def human_size(size_bytes: int) -> str:
    """``512 B``, ``3.2 KB``, ``1.4 MB`` (binary multiples)."""
    if size_bytes < 1024:
        return f"{size_bytes} B"
    if size_bytes < 1024 * 1024:
        return f"{size_bytes / 1024:.1f} KB"
    return f"{size_bytes / (1024 * 1024):.1f} MB"
