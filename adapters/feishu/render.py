"""Markdown answers → Feishu message content: JSON 2.0 cards, rich-text posts, plain text.

A card's JSON may be at most 30 KB, so long answers are split at block boundaries (paragraphs,
fenced code, tables) into several messages. Each table of an answer is a card table component,
one per card (further tables go to further cards); a table too big for a card shows its first
rows, and its full CSV follows as a file. The last part of an answer that used data ends with
its provenance: a grey line and the SQL in a collapsed panel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from adapters import markdown_tables
from adapters.markdown_tables import Table, plain_text
from agent_core.i18n import Language, t
from agent_core.provenance import ENGLISH, Provenance, ProvenanceWords

MAX_CARD_BYTES = 30 * 1024
# Room left for the card's own JSON around the Markdown (schema, config, element wrapper).
CONTENT_BUDGET_BYTES = MAX_CARD_BYTES - 2 * 1024
# Markdown tables a streaming card's Markdown element should hold (the preview only).
MAX_TABLES_PER_CARD = 3
# A card table component shows at most 50 columns, and pages through its rows 10 at a time.
MAX_TABLE_COLUMNS = 50
TABLE_PAGE_SIZE = 10
# The Markdown element that streaming updates and final answers write to.
ANSWER_ELEMENT_ID = "answer"
MORE_MARK = "\n\n…"
# The SQL shown in a card's panel: with the answer's part it must fit one card.
MAX_PROVENANCE_SQL_CHARS = 8000

_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_SEPARATOR_COST = 4  # "\n\n" as escaped JSON
# Bytes kept free beside a cut table for the note that says it was cut.
_CUT_NOTE_BYTES = 400


@dataclass
class CardPart:
    """One card of an answer: Markdown, then at most one table (the rows of it that fit);
    `full_table` is the whole table when the card shows only part of it."""

    markdown: str
    table: Table | None = None
    full_table: Table | None = None


def card_parts(text: str, *, budget_bytes: int = CONTENT_BUDGET_BYTES) -> list[CardPart]:
    """The answer as cards, each within `budget_bytes`, each with at most one table."""

    def fits(lead: str, table: Table) -> bool:
        shown = _fit_table(table, budget_bytes)
        return _cost(lead) + _SEPARATOR_COST + _table_cost(shown) + _CUT_NOTE_BYTES <= budget_bytes

    parts: list[CardPart] = []
    for part in markdown_tables.answer_parts(text, budget=budget_bytes, cost=_cost, fits=fits):
        if part.table is None:
            parts.append(CardPart(part.text))
            continue
        room = budget_bytes - (_cost(part.text) + _SEPARATOR_COST if part.text else 0)
        shown = _fit_table(part.table, room)
        cut = shown.rows != part.table.rows or shown.width != part.table.width
        parts.append(CardPart(part.text, shown, part.table if cut else None))
    return parts


def split_markdown(
    text: str,
    *,
    budget_bytes: int = CONTENT_BUDGET_BYTES,
    max_tables: int = MAX_TABLES_PER_CARD,
) -> list[str]:
    """Split Markdown (tables left as Markdown) into parts that each fit one card's Markdown."""
    return markdown_tables.split_markdown(text, budget=budget_bytes, cost=_cost, max_tables=max_tables)


def stream_preview(text: str) -> str:
    """What a streaming card shows of a partial answer: the part that fits one card (its tables
    as Markdown, which the card's Markdown element draws; the final card has table components)."""
    parts = split_markdown(text)
    if not parts:
        return ""
    return parts[0] + (MORE_MARK if len(parts) > 1 else "")


def answer_card(
    markdown: str,
    provenance: Provenance | None = None,
    table: Table | None = None,
    full_table: Table | None = None,
    words: ProvenanceWords = ENGLISH,
    language: Language = Language.EN,
    answer_id: str | None = None,
) -> dict[str, Any]:
    """A JSON 2.0 card showing one part of an answer: its Markdown, then its table (with a note
    when it shows only part of `full_table`); the last part of a data answer ends with its
    provenance (see `provenance_elements`), the last part of any answer with 👍/👎 naming
    `answer_id`."""
    elements: list[dict[str, Any]] = []
    if markdown or table is None:
        elements.append(_markdown_element(markdown))
    if table is not None:
        elements.append(table_element(table))
    if table is not None and full_table is not None:
        note = cut_note(table, full_table, language)
        elements.append({"tag": "markdown", "content": note, "text_size": "notation"})
    if provenance is not None:
        elements.extend(provenance_elements(provenance, words))
    if answer_id is not None:
        elements.append(feedback_buttons(answer_id, language))
    preview = summary(markdown) or (summary(", ".join(map(plain_text, table.header))) if table else "")
    return {
        "schema": "2.0",
        "config": {"update_multi": True, "width_mode": "fill", "summary": {"content": preview}},
        "body": {"elements": elements},
    }


def table_element(table: Table) -> dict[str, Any]:
    """A card table component: one column per header cell (Markdown allowed in cells)."""
    names = [f"c{i}" for i in range(table.width)]
    return {
        "tag": "table",
        "page_size": TABLE_PAGE_SIZE,
        "row_height": "low",
        "header_style": {"bold": True, "background_style": "grey", "text_align": "left"},
        "columns": [
            {
                "name": name,
                "display_name": plain_text(table.header[i]),
                "data_type": "lark_md",
                "horizontal_align": table.column_align(i),
                "width": "auto",
            }
            for i, name in enumerate(names)
        ],
        "rows": [_table_row(names, row) for row in table.rows],
    }


def cut_note(shown: Table, table: Table, language: Language = Language.EN) -> str:
    """The note under a table that shows only part of the whole."""
    rows = {"rows_shown": f"{len(shown.rows):,}", "rows": f"{len(table.rows):,}"}
    columns = {"columns_shown": shown.width, "columns": table.width}
    file = table.csv_name()
    if shown.width >= table.width:
        return t(language, "Showing the first {rows_shown} of {rows} rows; the full table follows as {file}.", file=file, **rows)
    if len(shown.rows) >= len(table.rows):
        return t(
            language, "Showing the first {columns_shown} of {columns} columns; the full table follows as {file}.",
            file=file, **columns,
        )  # fmt: skip
    return t(
        language,
        "Showing the first {rows_shown} of {rows} rows and the first {columns_shown} of {columns} columns; "
        "the full table follows as {file}.",
        file=file, **rows, **columns,
    )  # fmt: skip


def part_markdown(part: CardPart, language: Language = Language.EN) -> str:
    """A card part as plain Markdown (for a rich-text post): its table as aligned text."""
    table = [part.table.monospace()] if part.table is not None else []
    note = [cut_note(part.table, part.full_table, language)] if part.table and part.full_table else []
    return "\n\n".join(t for t in (part.markdown, *table, *note) if t)


def provenance_elements(provenance: Provenance, words: ProvenanceWords = ENGLISH) -> list[dict[str, Any]]:
    """The provenance line in grey, then the SQL behind the answer in a collapsed panel."""
    sql = provenance.sql_listing(words, max_chars=MAX_PROVENANCE_SQL_CHARS)
    return [
        {
            "tag": "markdown",
            "content": f"<font color='grey'>{_escape(provenance.summary_line(words))}</font>",
            "text_size": "notation",
        },
        {
            "tag": "collapsible_panel",
            "expanded": False,
            "header": {"title": {"tag": "plain_text", "content": words.sql_title}},
            "elements": [{"tag": "markdown", "content": f"```sql\n{sql}\n```"}],
        },
    ]


def feedback_cost(answer_id: str | None, language: Language = Language.EN) -> int:
    """Bytes the 👍/👎 add to an answer's last card (0 without them)."""
    if answer_id is None:
        return 0
    return _SEPARATOR_COST + len(json.dumps(feedback_buttons(answer_id, language), ensure_ascii=False).encode())


def provenance_cost(provenance: Provenance | None, words: ProvenanceWords = ENGLISH) -> int:
    """Bytes the provenance adds to a card (0 without one): the room the answer gives up."""
    if provenance is None:
        return 0
    elements = provenance_elements(provenance, words)
    return sum(_SEPARATOR_COST + len(json.dumps(e, ensure_ascii=False).encode()) for e in elements)


def post_markdown(markdown: str, provenance: Provenance | None, words: ProvenanceWords = ENGLISH) -> str:
    """The Markdown of a rich-text post, where no panel folds: the provenance line and the SQL
    follow the answer's last part as text."""
    if provenance is None:
        return markdown
    sql = provenance.sql_listing(words, max_chars=MAX_PROVENANCE_SQL_CHARS)
    return f"{markdown}\n\n{provenance.summary_line(words)}\n\n```sql\n{sql}\n```"


def streaming_card(markdown: str, stop: dict[str, Any] | None = None, language: Language = Language.EN) -> dict[str, Any]:
    """A JSON 2.0 card in streaming mode whose answer element starts as `markdown`, with a Stop
    button whose callback value is `stop` (the final answer replaces the card, and the button)."""
    card = answer_card(markdown)
    card["config"]["streaming_mode"] = True
    if stop is not None:
        card["body"]["elements"].append(_button(STOP_ELEMENT_ID, t(language, "Stop"), "default", stop))
    return card


STOP_ELEMENT_ID = "stop"
FEEDBACK_UP_ID = "feedback_up"
FEEDBACK_DOWN_ID = "feedback_down"


def feedback_buttons(answer_id: str, language: Language) -> dict[str, Any]:
    """👍/👎 under an answer; a click names the answer and the rating (and the language to
    answer the clicker in)."""
    columns = [
        {"tag": "column", "width": "auto", "elements": [_button(element_id, label, "text", {
            "feedback": rating, "answer_id": answer_id, "language": language.value})]}
        for element_id, label, rating in ((FEEDBACK_UP_ID, "👍", "up"), (FEEDBACK_DOWN_ID, "👎", "down"))
    ]  # fmt: skip
    return {"tag": "column_set", "element_id": "feedback", "columns": columns}


COMMENT_SEND_ID = "comment_send"


def comment_card(answer_id: str, language: Language) -> dict[str, Any]:
    """The optional "what was wrong?" after a 👎: a form whose Send names the answer."""
    send = _button(COMMENT_SEND_ID, t(language, "Send"), "primary", {"comment_for": answer_id, "language": language.value})
    send["form_action_type"] = "submit"
    send["name"] = COMMENT_SEND_ID
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {
            "elements": [
                {
                    "tag": "form",
                    "name": "what_was_wrong",
                    "element_id": "comment_form",
                    "elements": [
                        {
                            "tag": "input",
                            "name": "comment",
                            "element_id": "comment",
                            "required": False,
                            "input_type": "multiline_text",
                            "max_length": 1000,
                            "label": {"tag": "plain_text", "content": t(language, "What was wrong?")},
                            "placeholder": {"tag": "plain_text", "content": t(language, "What was wrong?")},
                        },
                        send,
                    ],
                }
            ]
        },
    }


def _button(element_id: str, label: str, kind: str, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "tag": "button",
        "element_id": element_id,
        "text": {"tag": "plain_text", "content": label},
        "type": kind,
        "behaviors": [{"type": "callback", "value": value}],
    }


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


def _escape(text: str) -> str:
    """Plain text for a card's Markdown: &, < and > as entities (< opens a tag there)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _markdown_element(markdown: str) -> dict[str, Any]:
    return {"tag": "markdown", "element_id": ANSWER_ELEMENT_ID, "content": markdown}


def _cost(text: str) -> int:
    """Bytes `text` takes inside a JSON string (escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def _table_row(names: list[str], row: list[str]) -> dict[str, str]:
    return {name: cell.replace("\\|", "|") for name, cell in zip(names, row, strict=True)}


def _table_cost(table: Table) -> int:
    return len(json.dumps(table_element(table), ensure_ascii=False).encode())


def _fit_table(table: Table, budget: int) -> Table:
    """The first columns and rows of `table` whose component (and a note) fit `budget` bytes."""
    shown = table.head(len(table.rows), MAX_TABLE_COLUMNS)
    room = budget - _CUT_NOTE_BYTES - _table_cost(shown.head(0, shown.width))
    names = [f"c{i}" for i in range(shown.width)]
    rows = 0
    for row in shown.rows:
        room -= len(json.dumps(_table_row(names, row), ensure_ascii=False).encode()) + 1
        if room < 0:
            break
        rows += 1
    return shown.head(rows, shown.width)
