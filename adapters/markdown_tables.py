"""Markdown answers read the way chat platforms need them.

An answer is read into blocks (paragraphs, fenced code, GFM pipe tables). Tables outside code
blocks are parsed into rows, so each platform can show them as its native table component and
attach the full table as CSV when it is too big to show. Text is split into parts of a size
budget at block boundaries, never inside a code block or a table; only a block too big on its
own is cut by lines, code fences closed and reopened, a table's header repeated.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Align = Literal["left", "center", "right"]

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
_NUMBER = re.compile(r"^[-+−]?[$€£¥]?\s?\d[\d,_ ]*(\.\d+)?\s?(%|[kKmMbB]|pp)?$")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_EMPHASIS = re.compile(r"(\*\*|__|~~)(.+?)\1|`([^`]+)`")


@dataclass
class Block:
    kind: Literal["text", "code", "table"]
    lines: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@dataclass
class Table:
    """A Markdown table: header cells, body rows (each as wide as the header) and the alignment
    its separator row asked for (None: not given)."""

    header: list[str]
    rows: list[list[str]]
    align: list[Align | None]

    @property
    def width(self) -> int:
        return len(self.header)

    def column_align(self, index: int) -> Align:
        """The alignment asked for, else right for a column of numbers, else left."""
        asked = self.align[index] if index < len(self.align) else None
        if asked is not None:
            return asked
        values = [plain_text(row[index]) for row in self.rows if row[index].strip()]
        return "right" if values and all(_NUMBER.match(v) for v in values) else "left"

    def head(self, rows: int, columns: int) -> Table:
        """The first `rows` rows and `columns` columns."""
        return Table(
            header=self.header[:columns],
            rows=[row[:columns] for row in self.rows[:rows]],
            align=self.align[:columns],
        )

    def csv(self) -> str:
        """The whole table as CSV (cells as plain text), header first."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([plain_text(cell) for cell in self.header])
        writer.writerows([plain_text(cell) for cell in row] for row in self.rows)
        return out.getvalue()

    def csv_name(self) -> str:
        """A file name for the CSV, named by its content: the same table gets the same name, so a
        resumed delivery can tell it already attached it."""
        digest = hashlib.sha256(self.csv().encode()).hexdigest()[:10]
        return f"table-{digest}.csv"

    def monospace(self) -> str:
        """The table as aligned columns in a code block, for surfaces without a table component."""
        cells = [[plain_text(c) for c in self.header], *([plain_text(c) for c in r] for r in self.rows)]
        widths = [max(len(row[i]) for row in cells) for i in range(self.width)]
        lines = []
        for number, row in enumerate(cells):
            padded = [
                cell.rjust(widths[i]) if self.column_align(i) == "right" else cell.ljust(widths[i])
                for i, cell in enumerate(row)
            ]
            lines.append("  ".join(padded).rstrip())
            if number == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "```\n" + "\n".join(lines) + "\n```"


@dataclass
class AnswerPart:
    """One message of an answer: Markdown text, then at most one table."""

    text: str
    table: Table | None = None


def plain_text(cell: str) -> str:
    """A cell's text without inline Markdown: emphasis and code marks dropped, links as
    "text (url)"."""
    text = _LINK.sub(lambda m: f"{m.group(1)} ({m.group(2)})", cell)
    previous = None
    while previous != text:
        previous, text = text, _EMPHASIS.sub(lambda m: m.group(2) or m.group(3) or "", text)
    return text.replace("\\|", "|").strip()


def read_blocks(markdown: str) -> list[Block]:
    """Paragraphs, fenced code blocks and tables, in order; blank lines separate paragraphs.

    A table is a row with pipes directly followed by a separator row ("|---|:--:|"); inside a
    code block nothing is a table.
    """
    lines = markdown.strip("\n").splitlines()
    blocks: list[Block] = []
    paragraph: list[str] = []

    def end_paragraph() -> None:
        if paragraph:
            blocks.append(Block("text", paragraph.copy()))
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
            blocks.append(Block("code", lines[i : j + 1]))
            i = j + 1
        elif "|" in line and i + 1 < len(lines) and _is_table_separator(lines[i + 1]):
            end_paragraph()
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            blocks.append(Block("table", lines[i:j]))
            i = j
        elif not line.strip():
            end_paragraph()
            i += 1
        else:
            paragraph.append(line)
            i += 1
    end_paragraph()
    return blocks


def parse_table(block: Block) -> Table:
    """The cells of a table block; short rows are padded, long rows cut to the header's width."""
    header = _cells(block.lines[0])
    width = len(header)
    align = [_alignment(cell) for cell in _cells(block.lines[1])]
    align = (align + [None] * width)[:width]
    rows = [(_cells(line) + [""] * width)[:width] for line in block.lines[2:]]
    return Table(header=header, rows=rows, align=align)


def answer_parts(
    markdown: str,
    *,
    budget: int,
    cost: Callable[[str], int] = len,
    fits: Callable[[str, Table], bool] = lambda text, table: True,
) -> list[AnswerPart]:
    """The answer as messages: text split within `budget`, each table in a message of its own,
    together with the text just before it when `fits` says the two fit one message."""
    parts: list[AnswerPart] = []
    run: list[Block] = []

    def text_parts() -> list[str]:
        texts = split_blocks(run, budget=budget, cost=cost)
        run.clear()
        return texts

    for block in read_blocks(markdown):
        if block.kind != "table":
            run.append(block)
            continue
        table = parse_table(block)
        texts = text_parts()
        lead = texts.pop() if texts and fits(texts[-1], table) else ""
        parts.extend(AnswerPart(text) for text in texts)
        parts.append(AnswerPart(lead, table))
    parts.extend(AnswerPart(text) for text in text_parts())
    return parts


def split_markdown(
    markdown: str,
    *,
    budget: int,
    cost: Callable[[str], int] = len,
    max_tables: int | None = None,
) -> list[str]:
    """Markdown (tables left as Markdown) in parts that each cost at most `budget` and hold at
    most `max_tables` tables."""
    return split_blocks(read_blocks(markdown), budget=budget, cost=cost, max_tables=max_tables)


def split_blocks(
    blocks: list[Block],
    *,
    budget: int,
    cost: Callable[[str], int] = len,
    max_tables: int | None = None,
) -> list[str]:
    """Blocks joined into parts within `budget`, split only between blocks; a block too big on
    its own is cut into pieces that each fit."""
    separator = cost("\n\n")
    parts: list[str] = []
    current: list[Block] = []
    used = tables = 0
    for block in (piece for b in blocks for piece in _fit(b, budget, cost)):
        block_cost = cost(block.text)
        too_big = used + separator + block_cost > budget
        too_many = block.kind == "table" and max_tables is not None and tables >= max_tables
        if current and (too_big or too_many):
            parts.append("\n\n".join(b.text for b in current))
            current, used, tables = [], 0, 0
        used += block_cost + (separator if current else 0)
        tables += block.kind == "table"
        current.append(block)
    if current:
        parts.append("\n\n".join(b.text for b in current))
    return parts


def _is_table_separator(line: str) -> bool:
    # "|---|:--:|"; a bare "---" under a line is a heading underline or a rule, not a table.
    return "|" in line and _TABLE_SEPARATOR.match(line) is not None


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip() for cell in _UNESCAPED_PIPE.split(body)]


def _alignment(separator_cell: str) -> Align | None:
    cell = separator_cell.strip()
    if cell.startswith(":") and cell.endswith(":"):
        return "center"
    if cell.endswith(":"):
        return "right"
    if cell.startswith(":"):
        return "left"
    return None


def _fit(block: Block, budget: int, cost: Callable[[str], int]) -> list[Block]:
    """The block, or pieces of it that each fit `budget`."""
    if cost(block.text) <= budget:
        return [block]
    if block.kind == "code":
        opening = block.lines[0]
        fence = _FENCE.match(opening)
        assert fence is not None  # a code block always starts with its fence line
        has_closing = len(block.lines) > 1 and _FENCE.match(block.lines[-1]) is not None
        body = block.lines[1:-1] if has_closing else block.lines[1:]
        closing = fence.group(1)
        frame = [opening, closing]
        return [Block("code", [opening, *rows, closing]) for rows in _pack(body, budget, frame, cost)]
    if block.kind == "table":
        header = block.lines[:2]
        return [Block("table", [*header, *rows]) for rows in _pack(block.lines[2:], budget, header, cost)]
    return [Block("text", rows) for rows in _pack(block.lines, budget, [], cost)]


def _pack(lines: list[str], budget: int, frame: list[str], cost: Callable[[str], int]) -> list[list[str]]:
    """Group lines so that each group plus the repeated `frame` lines fits `budget`."""
    newline = cost("\n")
    room = budget - sum(cost(line) + newline for line in frame)
    groups: list[list[str]] = []
    group: list[str] = []
    used = 0
    for line in _hard_wrap(lines, room, cost):
        line_cost = cost(line) + newline
        if group and used + line_cost > room:
            groups.append(group)
            group, used = [], 0
        group.append(line)
        used += line_cost
    if group:
        groups.append(group)
    return groups


def _hard_wrap(lines: list[str], room: int, cost: Callable[[str], int]) -> list[str]:
    """Lines longer than `room` cut at a space where there is one in the second half."""
    out: list[str] = []
    for line in lines:
        while cost(line) + cost("\n") > room:
            width = max(1, len(line) * room // max(cost(line) + cost("\n"), 1) - 1)
            while width > 1 and cost(line[:width]) + cost("\n") > room:
                width = width * 3 // 4  # some characters cost more than the average
            cut = line.rfind(" ", 0, width)
            cut = cut if cut > width // 2 else width
            out.append(line[:cut])
            line = line[cut:].lstrip()
        out.append(line)
    return out
