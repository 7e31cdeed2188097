"""The card JSON 2.0 rules the fake Feishu enforces on table components, as Feishu does: a table
only at the root of `body.elements`, at most five per card, `page_size` 1 to 10, only the
documented properties (JSON 2.0 refuses unknown ones), rows as objects keyed by column name."""

from __future__ import annotations

from typing import Any

CODE_CARD_INVALID = 230099
MAX_TABLES_PER_CARD = 5
_TABLE_KEYS = frozenset({
    "tag", "element_id", "margin", "page_size", "row_height", "row_max_height",
    "freeze_first_column", "header_style", "columns", "rows",
})  # fmt: skip
_COLUMN_KEYS = frozenset({
    "name", "display_name", "width", "vertical_align", "horizontal_align", "data_type", "format",
    "date_format",
})  # fmt: skip
_DATA_TYPES = frozenset({"text", "lark_md", "options", "number", "persons", "date", "markdown"})
_ALIGNS = frozenset({"left", "center", "right"})


def card_problem(card: dict[str, Any]) -> str | None:
    """Why Feishu would refuse this card's tables, or None."""
    elements = (card.get("body") or {}).get("elements") or card.get("elements") or []
    if any(_has_table(e) for e in elements if isinstance(e, dict) and e.get("tag") != "table"):
        return "table component can only be placed at the root of the card"
    tables = [e for e in elements if isinstance(e, dict) and e.get("tag") == "table"]
    if len(tables) > MAX_TABLES_PER_CARD:
        return f"a card holds at most {MAX_TABLES_PER_CARD} table components"
    for table in tables:
        problem = _table_problem(table)
        if problem:
            return problem
    return None


def _has_table(element: Any) -> bool:
    if isinstance(element, dict):
        return element.get("tag") == "table" or any(_has_table(v) for v in element.values())
    if isinstance(element, list):
        return any(_has_table(v) for v in element)
    return False


def _table_problem(table: dict[str, Any]) -> str | None:
    unknown = set(table) - _TABLE_KEYS
    if unknown:
        return f"table: unknown properties {sorted(unknown)}"
    if not 1 <= int(table.get("page_size", 5)) <= 10:
        return "table: page_size must be in [1, 10]"
    columns = table.get("columns")
    if not isinstance(columns, list) or not columns:
        return "table: columns is required"
    names = set()
    for column in columns:
        if not isinstance(column, dict) or not column.get("name") or set(column) - _COLUMN_KEYS:
            return "table: each column needs a name and only documented properties"
        if column.get("data_type", "text") not in _DATA_TYPES:
            return f"table: unknown data_type {column.get('data_type')!r}"
        if column.get("horizontal_align", "left") not in _ALIGNS:
            return "table: horizontal_align must be left, center or right"
        names.add(column["name"])
    rows = table.get("rows", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) <= names for r in rows):
        return "table: rows must be objects keyed by column names"
    return None
