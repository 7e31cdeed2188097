"""Markdown answers → Slack messages: split within Slack's limits, code fences kept intact."""

from __future__ import annotations

import re

# Slack accepts up to 12,000 characters of `markdown_text`; shorter parts read better in a thread.
MAX_PART_CHARS = 3900
_FENCE = re.compile(r"^\s*```(.*)$")


def split_markdown(text: str, limit: int = MAX_PART_CHARS) -> list[str]:
    """Split Markdown into parts of at most `limit` characters.

    Splits prefer paragraph breaks, then line breaks. A code block that has to be split is
    closed at the end of one part and reopened (same language) at the start of the next.
    """
    text = text.strip() or "(empty answer)"
    if len(text) <= limit:
        return [text]
    parts: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None  # the opening fence line of the block we are inside, if any

    def flush() -> None:
        nonlocal current, size
        body = "\n".join(current).strip("\n")
        if fence is not None:
            body += "\n```"
        if body.strip():
            parts.append(body)
        current = [fence] if fence is not None else []
        size = len(fence) + 1 if fence is not None else 0

    for line in _lines_within(text, limit - 16):
        needed = len(line) + 1
        if size + needed > limit - 4 or (not line.strip() and size > limit * 0.8 and fence is None):
            flush()
        current.append(line)
        size += needed
        match = _FENCE.match(line)
        if match:
            fence = None if fence is not None else line.strip()
    flush()
    return parts


def _lines_within(text: str, width: int) -> list[str]:
    """Lines of `text`, hard-wrapping any single line longer than `width`."""
    lines: list[str] = []
    for line in text.split("\n"):
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            cut = cut if cut > width // 2 else width
            lines.append(line[:cut])
            line = line[cut:].lstrip()
        lines.append(line)
    return lines
