"""Markdown answers → Feishu message content: JSON 2.0 cards, rich-text posts, plain text.

A card's JSON may be at most 30 KB and should hold at most 3 Markdown tables, so long answers are
split at block boundaries (paragraphs, fenced code, tables) into several messages. A block that is
too big on its own is split by lines; code fences are closed and reopened, and a split table
repeats its header row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

MAX_CARD_BYTES = 30 * 1024
# Room left for the card's own JSON around the Markdown (schema, config, element wrapper).
CONTENT_BUDGET_BYTES = MAX_CARD_BYTES - 2 * 1024
MAX_TABLES_PER_CARD = 3
# The Markdown element that streaming updates and final answers write to.
ANSWER_ELEMENT_ID = "answer"
MORE_MARK = "\n\n…"

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_SEPARATOR_COST = 4  # "\n\n" as escaped JSON


@dataclass
class _Block:
    kind: Literal["text", "code", "table"]
    lines: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def split_markdown(
    text: str,
    *,
    budget_bytes: int = CONTENT_BUDGET_BYTES,
    max_tables: int = MAX_TABLES_PER_CARD,
) -> list[str]:
    """Split Markdown into parts that each fit one card (size and table count)."""
    blocks = [piece for block in _blocks(text) for piece in _fit(block, budget_bytes)]
    parts: list[str] = []
    current: list[_Block] = []
    cost = tables = 0
    for block in blocks:
        block_cost = _cost(block.text)
        too_big = cost + _SEPARATOR_COST + block_cost > budget_bytes
        too_many_tables = block.kind == "table" and tables >= max_tables
        if current and (too_big or too_many_tables):
            parts.append("\n\n".join(b.text for b in current))
            current, cost, tables = [], 0, 0
        cost += block_cost + (_SEPARATOR_COST if current else 0)
        tables += block.kind == "table"
        current.append(block)
    if current:
        parts.append("\n\n".join(b.text for b in current))
    return parts


def stream_preview(text: str) -> str:
    """What a streaming card shows of a partial answer: the part that fits one card."""
    parts = split_markdown(text)
    if not parts:
        return ""
    return parts[0] + (MORE_MARK if len(parts) > 1 else "")


def answer_card(markdown: str) -> dict[str, Any]:
    """A JSON 2.0 card showing one Markdown part of an answer."""
    return {
        "schema": "2.0",
        "config": {
            "update_multi": True,
            "width_mode": "fill",
            "summary": {"content": summary(markdown)},
        },
        "body": {"elements": [_markdown_element(markdown)]},
    }


def streaming_card(markdown: str) -> dict[str, Any]:
    """A JSON 2.0 card in streaming mode whose answer element starts as `markdown`."""
    card = answer_card(markdown)
    card["config"]["streaming_mode"] = True
    return card


def status_markdown(status: str) -> str:
    """A grey progress line, shown in a streaming card until the answer starts."""
    return f"<font color='grey'>⏳ {status}</font>"


def post_content(markdown: str) -> dict[str, Any]:
    """A rich-text post carrying Markdown (the fallback when cards are not allowed)."""
    return {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": markdown}]]}}


def text_content(text: str) -> dict[str, Any]:
    """A plain text message."""
    return {"text": text}


def summary(markdown: str, limit: int = 80) -> str:
    """The chat-list preview of a card: its first line without Markdown markup."""
    for line in markdown.splitlines():
        plain = re.sub(r"<[^>]+>|[#*_`>|~]", "", line).strip()
        if plain and not _TABLE_SEPARATOR.match(line):
            return plain if len(plain) <= limit else plain[: limit - 1] + "…"
    return ""


def _markdown_element(markdown: str) -> dict[str, Any]:
    return {"tag": "markdown", "element_id": ANSWER_ELEMENT_ID, "content": markdown}


def _cost(text: str) -> int:
    """Bytes `text` takes inside a JSON string (escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def _blocks(text: str) -> list[_Block]:
    """Paragraphs, fenced code blocks and tables, in order; blank lines separate paragraphs."""
    lines = text.strip("\n").splitlines()
    blocks: list[_Block] = []
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            blocks.append(_Block("text", paragraph.copy()))
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            end_paragraph()
            marker = fence.group(1)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(marker):
                j += 1
            blocks.append(_Block("code", lines[i : j + 1]))
            i = j + 1
        elif "|" in line and i + 1 < len(lines) and _is_table_separator(lines[i + 1]):
            end_paragraph()
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            blocks.append(_Block("table", lines[i:j]))
            i = j
        elif not line.strip():
            end_paragraph()
            i += 1
        else:
            paragraph.append(line)
            i += 1
    end_paragraph()
    return blocks


def _is_table_separator(line: str) -> bool:
    # "|---|:--:|"; a bare "---" under a line is a heading underline or a rule, not a table.
    return "|" in line and _TABLE_SEPARATOR.match(line) is not None


def _fit(block: _Block, budget: int) -> list[_Block]:
    """The block, or pieces of it that each fit `budget`."""
    if _cost(block.text) <= budget:
        return [block]
    if block.kind == "code":
        opening = block.lines[0]
        has_closing = len(block.lines) > 1 and _FENCE.match(block.lines[-1]) is not None
        body = block.lines[1:-1] if has_closing else block.lines[1:]
        fence = _FENCE.match(opening)
        assert fence is not None  # a code block always starts with its fence line
        closing = fence.group(1)
        frame = [opening, closing]
        return [_Block("code", [opening, *rows, closing]) for rows in _pack(body, budget, frame)]
    if block.kind == "table":
        header = block.lines[:2]
        return [
            _Block("table", [*header, *rows]) for rows in _pack(block.lines[2:], budget, header)
        ]
    return [_Block("text", rows) for rows in _pack(block.lines, budget, [])]


def _pack(lines: list[str], budget: int, frame: list[str]) -> list[list[str]]:
    """Group lines so that each group plus the repeated `frame` lines fits `budget`."""
    room = budget - sum(_cost(line) + 2 for line in frame)
    groups: list[list[str]] = []
    group: list[str] = []
    used = 0
    for line in _hard_wrap(lines, room):
        line_cost = _cost(line) + 2  # plus its "\n"
        if group and used + line_cost > room:
            groups.append(group)
            group, used = [], 0
        group.append(line)
        used += line_cost
    if group:
        groups.append(group)
    return groups


def _hard_wrap(lines: list[str], room: int) -> list[str]:
    """Cut lines longer than `room` bytes (a character costs at most 6 escaped bytes)."""
    width = max(room // 6, 1)
    out: list[str] = []
    for line in lines:
        if _cost(line) + 2 <= room:
            out.append(line)
        else:
            out.extend(line[i : i + width] for i in range(0, len(line), width))
    return out
