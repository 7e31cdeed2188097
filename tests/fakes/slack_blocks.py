"""The Block Kit limits the fake Slack enforces on a message's blocks, as Slack does."""

from __future__ import annotations

from typing import Any


class InvalidBlocks(Exception):
    """Slack's `invalid_blocks` error, with the reason it gives in `response_metadata`."""


# Block Kit limits on one message.
_MAX_BLOCKS = 50
_MAX_MARKDOWN_BLOCK_CHARS = 12_000  # all markdown blocks of a message together
_MAX_TABLE_ROWS = 100
_MAX_TABLE_CELLS = 20
_TABLE_CELL_TYPES = frozenset({"raw_text", "raw_number", "rich_text"})
_COLUMN_ALIGNS = frozenset({"left", "center", "right"})


def check_blocks(blocks: Any) -> None:
    """Refuse blocks Slack would refuse (`invalid_blocks`): the table block's limits (one per
    message, at most 100 rows of at most 20 cells, typed non-empty cells, at most 20 column
    settings), the markdown blocks' 12,000 characters, 50 blocks per message."""
    if blocks is None:
        return
    if not isinstance(blocks, list) or len(blocks) > _MAX_BLOCKS:
        raise InvalidBlocks(f"must provide an array of at most {_MAX_BLOCKS} blocks")
    tables = [b for b in blocks if b.get("type") == "table"]
    if len(tables) > 1:
        raise InvalidBlocks("only one table block is allowed per message")
    markdown = sum(len(b.get("text") or "") for b in blocks if b.get("type") == "markdown")
    if markdown > _MAX_MARKDOWN_BLOCK_CHARS:
        raise InvalidBlocks("markdown blocks exceed 12000 characters")
    for block in blocks:
        if block.get("type") == "context_actions":
            _check_context_actions(block)
    for table in tables:
        rows = table.get("rows")
        if not isinstance(rows, list) or not rows or len(rows) > _MAX_TABLE_ROWS:
            raise InvalidBlocks("table rows must hold 1 to 100 rows")
        for row in rows:
            if not isinstance(row, list) or not row or len(row) > _MAX_TABLE_CELLS:
                raise InvalidBlocks("a table row must hold 1 to 20 cells")
            for cell in row:
                if not isinstance(cell, dict) or cell.get("type") not in _TABLE_CELL_TYPES:
                    raise InvalidBlocks("table cells must be raw_text or rich_text")
                if cell["type"] == "raw_text" and not (isinstance(cell.get("text"), str) and cell["text"]):
                    raise InvalidBlocks("a raw_text cell must have text")
        settings = table.get("column_settings") or []
        if len(settings) > _MAX_TABLE_CELLS or any(
            s is not None and s.get("align", "left") not in _COLUMN_ALIGNS for s in settings
        ):
            raise InvalidBlocks("column_settings: at most 20, align left/center/right")


def _check_context_actions(block: dict[str, Any]) -> None:
    """A context_actions block: 1 to 5 feedback_buttons / icon_button elements; feedback
    buttons carry a positive and a negative button, each with plain text and a value."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not 1 <= len(elements) <= 5:
        raise InvalidBlocks("context_actions must hold 1 to 5 elements")
    for element in elements:
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == "feedback_buttons":
            for side in ("positive_button", "negative_button"):
                button = element.get(side)
                if not isinstance(button, dict) or not button.get("value"):
                    raise InvalidBlocks(f"feedback_buttons needs a {side} with a value")
                text = button.get("text")
                if not isinstance(text, dict) or text.get("type") != "plain_text" or not text.get("text"):
                    raise InvalidBlocks(f"{side} needs plain_text text")
        elif kind != "icon_button":
            raise InvalidBlocks("context_actions elements must be feedback_buttons or icon_button")
