"""Turning raw tool data into the observation the model reads.

Tools return raw data; this module recognizes its shape and renders it for an output level:

- `Table`: columns + rows (a ``QueryResult``-like mapping, a list of dicts, a pandas-like frame);
- `Record`: a dict / object;
- `Items`: any other list;
- `Text`: a string (and scalars).

Pydantic models and dataclasses are dumped first, then shaped like the rest. Every value is
made JSON-native once, while shaping, so rendering and file serialization agree.

BRIEF states key facts, STANDARD gives an actionable preview, FULL gives everything or -- when
large -- a summary (the caller stores the data and passes the file in). Also here: the one
standard error observation, the cheap token estimate, and the head+tail preview used when an
observation is too large to show.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, is_dataclass
from datetime import date, datetime
from datetime import time as time_of_day
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent_core.toolkit.levels import OUTPUT_LEVEL_FIELD, OutputLevel
from agent_core.toolkit.storage import StoredFile
from agent_core.units import human_size

# --- errors ----------------------------------------------------------------------------------


class ErrorType(StrEnum):
    PERMISSION_DENIED = "permission_denied"
    TIMEOUT = "timeout"
    INVALID_PARAMETERS = "invalid_parameters"
    EXECUTION_ERROR = "execution_error"
    RESOURCE_ERROR = "resource_error"


def error_observation(
    *,
    error_type: ErrorType,
    code: str,
    message: str,
    tool: str,
    tool_use_id: str,
    retry_after_s: float | None = None,
) -> str:
    """The one standard error observation every failed tool call produces (a JSON object)."""
    error: dict[str, Any] = {
        "type": error_type.value,
        "code": code,
        "message": message,
        "tool": tool,
        "tool_use_id": tool_use_id,
    }
    if retry_after_s is not None:
        error["retry_after_s"] = round(retry_after_s, 1)
    return json.dumps({"error": error}, ensure_ascii=False)


# --- settings and token estimate -------------------------------------------------------------


class FormatSettings(BaseModel):
    """How much each level shows."""

    model_config = ConfigDict(frozen=True)

    preview_rows: int = Field(20, ge=1)  # table rows in a STANDARD preview
    summary_rows: int = Field(5, ge=0)  # table rows in a FULL-but-stored summary
    preview_items: int = Field(20, ge=1)  # list items in a STANDARD preview
    preview_fields: int = Field(50, ge=1)  # object fields in a STANDARD preview
    brief_fields: int = Field(12, ge=1)  # columns / fields named in BRIEF
    brief_items: int = Field(5, ge=0)  # scalar list items quoted in BRIEF
    cell_chars: int = Field(80, ge=8)  # table cells and BRIEF values are cut to this
    string_chars: int = Field(500, ge=20)  # strings inside a STANDARD JSON preview
    brief_text_chars: int = Field(300, ge=20)  # text shown by BRIEF
    summary_text_chars: int = Field(2000, ge=100)  # text shown by a FULL-but-stored summary


_ASCII_RUN = re.compile(r"[\x00-\x7f]+")


def estimate_tokens(text: str) -> int:
    """A cheap, conservative token estimate: ~4 ASCII characters or 1 other character per token.

    CJK text runs at about one token per character; counting every non-ASCII character as a
    token over-estimates accented Latin, which is the safe side for a size guard.
    """
    non_ascii = len(_ASCII_RUN.sub("", text))  # the regex runs in C: fine on megabytes
    return (len(text) - non_ascii + 3) // 4 + non_ascii


# --- shapes ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Any]]
    column_types: list[str] | None = None
    total_rows: int = 0  # rows the source says exist; at least len(rows)
    capped: bool = False  # the source returned fewer rows than existed


@dataclass(frozen=True)
class Record:
    fields: dict[str, Any]


@dataclass(frozen=True)
class Items:
    items: list[Any]


@dataclass(frozen=True)
class Text:
    text: str


Shape = Table | Record | Items | Text


def shape_of(raw: Any) -> Shape:
    """Recognize the shape of raw tool data (values are made JSON-native on the way)."""
    if isinstance(raw, BaseModel):
        return shape_of(raw.model_dump(mode="json"))
    if is_dataclass(raw) and not isinstance(raw, type):
        return shape_of(asdict(raw))
    if isinstance(raw, str):
        return Text(raw)
    if _is_frame(raw):
        return _frame_table(raw)
    if isinstance(raw, Mapping):
        fields = {str(key): to_plain(value) for key, value in raw.items()}
        return _mapping_table(fields) or Record(fields)
    if isinstance(raw, list | tuple | set | frozenset):
        items = [to_plain(value) for value in raw]
        if items and all(isinstance(item, dict) for item in items):
            return _records_table(items)
        return Items(items)
    value = to_plain(raw)
    return Text(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def to_plain(value: Any) -> Any:
    """``value`` as JSON-native data (dict / list / str / int / float / bool / None)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(key): to_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_plain(item) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return to_plain(asdict(value))
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    item = getattr(value, "item", None)  # numpy / pandas scalars
    if callable(item):
        try:
            return to_plain(item())
        except (TypeError, ValueError):
            pass
    # Decimal and anything else: its text, which keeps a Decimal's exact digits.
    return str(value)


def _is_frame(raw: Any) -> bool:
    return (
        not isinstance(raw, Mapping) and hasattr(raw, "columns") and callable(getattr(raw, "to_dict", None))
    )


def _frame_table(frame: Any) -> Shape:
    split = frame.to_dict(orient="split")  # {"index": [...], "columns": [...], "data": [[...]]}
    columns = [str(column) for column in split["columns"]]
    rows = [[to_plain(value) for value in row] for row in split["data"]]
    dtypes = getattr(frame, "dtypes", None)
    types = [str(dtype) for dtype in dtypes] if dtypes is not None else None
    return Table(columns, rows, types, total_rows=len(rows))


def _mapping_table(fields: dict[str, Any]) -> Table | None:
    """A ``{"columns": [...], "rows": [[...]], ...}`` mapping (e.g. a dumped QueryResult)."""
    columns, rows = fields.get("columns"), fields.get("rows")
    if not (
        isinstance(columns, list)
        and all(isinstance(column, str) for column in columns)
        and isinstance(rows, list)
        and all(isinstance(row, list) and len(row) == len(columns) for row in rows)
    ):
        return None
    types = fields.get("column_types")
    if not (isinstance(types, list) and len(types) == len(columns)):
        types = None
    row_count = fields.get("row_count")
    total = row_count if isinstance(row_count, int) and row_count > len(rows) else len(rows)
    return Table(columns, rows, types, total_rows=total, capped=fields.get("truncated") is True)


def _records_table(records: list[dict[str, Any]]) -> Table:
    columns = list(dict.fromkeys(key for record in records for key in record))
    rows = [[record.get(column) for column in columns] for record in records]
    return Table(columns, rows, None, total_rows=len(rows))


# --- serialization ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Serialized:
    """Raw data as file content: CSV for tables, text for text, JSON for the rest."""

    text: str
    content: bytes
    extension: str


def serialize(shape: Shape) -> Serialized:
    """The complete data of ``shape`` as it is stored in a data file."""
    if isinstance(shape, Table):
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(shape.columns)
        writer.writerows([_csv_value(value) for value in row] for row in shape.rows)
        text, extension = buffer.getvalue(), "csv"
    elif isinstance(shape, Text):
        text, extension = shape.text, "txt"
    else:
        data = shape.fields if isinstance(shape, Record) else shape.items
        # Indented: workspace reads page by line, so one giant line would be unreadable.
        text, extension = json.dumps(data, ensure_ascii=False, indent=2), "json"
    return Serialized(text, text.encode("utf-8"), extension)


def _csv_value(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return "" if value is None else value


# --- rendering -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """The level-specific part of an observation."""

    text: str
    complete: bool  # nothing of the data was left out
    summary: bool = False  # FULL shown as a summary: the data is too large to inline


def render(
    shape: Shape, level: OutputLevel, settings: FormatSettings, *, full_inline: bool = True
) -> Rendered:
    """``shape`` rendered for ``level``; ``full_inline`` False makes FULL a summary."""
    renderer = _Renderer(settings)
    if level is OutputLevel.BRIEF:
        return Rendered(*renderer.brief(shape))
    if level is OutputLevel.STANDARD:
        return Rendered(*renderer.standard(shape))
    if full_inline:
        return Rendered(renderer.full(shape), complete=True)
    return Rendered(renderer.summary(shape), complete=False, summary=True)


def compose_observation(
    rendered: Rendered, *, stored: StoredFile | None = None, notes: Sequence[str] = ()
) -> str:
    """The observation: the rendered data, where the complete data is (or how to get it), notes."""
    parts = [rendered.text]
    if stored is not None:
        where = f"{stored.path} ({human_size(stored.size_bytes)}, {stored.format})"
        if rendered.summary:
            parts.append(f"The complete data is too large to show here; it is in {where}.")
        else:
            parts.append(f"Complete data: {where}.")
    elif not rendered.complete and not rendered.summary:
        parts.append(f'Call again with {OUTPUT_LEVEL_FIELD}="full" for the complete data.')
    parts.extend(notes)
    return "\n\n".join(parts)


def head_tail_preview(
    observation: str, *, head_tokens: int, tail_tokens: int, stored: StoredFile | None
) -> str:
    """Replace a too-large observation by its beginning and end, pointing at the data file."""
    head = _cut_to_line(_prefix_within(observation, head_tokens), from_end=False)
    tail = _cut_to_line(_suffix_within(observation, tail_tokens), from_end=True)
    omitted = len(observation) - len(head) - len(tail)
    if stored is not None:
        where = (
            f"The complete data is in {stored.path} ({human_size(stored.size_bytes)}, "
            f"{stored.format}); read it in pages rather than all at once."
        )
    else:
        where = "The complete data could not be saved to a file."
    return (
        f"This result is too large to show (about {estimate_tokens(observation):,} tokens). "
        f"{where} Its beginning and end:\n\n{head}\n\n[… {omitted:,} characters omitted …]\n\n{tail}"
    )


def _prefix_within(text: str, tokens: int) -> str:
    size = min(len(text), tokens * 4)
    while size and (used := estimate_tokens(text[:size])) > tokens:
        size = size * tokens // used  # strictly shrinks: used > tokens
    return text[:size]


def _suffix_within(text: str, tokens: int) -> str:
    size = min(len(text), tokens * 4)
    while size and (used := estimate_tokens(text[len(text) - size :])) > tokens:
        size = size * tokens // used
    return text[len(text) - size :] if size else ""


def _cut_to_line(piece: str, *, from_end: bool) -> str:
    """Trim a partial line off the cut edge, unless that would lose most of the piece."""
    if from_end:
        newline = piece.find("\n")
        return piece[newline + 1 :] if 0 <= newline < len(piece) // 5 else piece
    newline = piece.rfind("\n")
    return piece[:newline] if newline > len(piece) * 4 // 5 else piece


class _Renderer:
    """Renders each shape per level; `brief`/`standard` also say whether nothing was left out."""

    def __init__(self, settings: FormatSettings) -> None:
        self.s = settings

    # -- dispatch

    def brief(self, shape: Shape) -> tuple[str, bool]:
        if isinstance(shape, Table):
            return self._table_brief(shape)
        if isinstance(shape, Record):
            return self._record_brief(shape)
        if isinstance(shape, Items):
            return self._items_brief(shape)
        return self._text_brief(shape)

    def standard(self, shape: Shape) -> tuple[str, bool]:
        if isinstance(shape, Table):
            return self._table_preview(shape, self.s.preview_rows)
        if isinstance(shape, Record | Items):
            data = shape.fields if isinstance(shape, Record) else shape.items
            if isinstance(shape, Items) and shape.items and all(_is_scalar(i) for i in shape.items):
                return self._scalar_list(shape.items)
            trimmed, complete = self._trim(data)
            return _json(trimmed), complete
        return shape.text, True

    def full(self, shape: Shape) -> str:
        if isinstance(shape, Table):
            lines = [self._table_heading(shape), _markdown_table(shape.columns, shape.rows, None)]
            if shape.capped or shape.total_rows > len(shape.rows):
                lines.append(self._capped_notice(shape))
            return "\n\n".join(lines)
        if isinstance(shape, Record):
            return _json(shape.fields)
        if isinstance(shape, Items):
            return _json(shape.items)
        return shape.text

    def summary(self, shape: Shape) -> str:
        """What FULL shows of data too large to inline (the data itself is in a file)."""
        if isinstance(shape, Table):
            return self._table_preview(shape, self.s.summary_rows)[0]
        if isinstance(shape, Text):
            head = shape.text[: self.s.summary_text_chars]
            return f"{_text_facts(shape.text)} It begins:\n\n{head}"
        return self.brief(shape)[0]

    # -- tables

    def _table_brief(self, table: Table) -> tuple[str, bool]:
        if table.total_rows == 0:
            return f"No rows. Columns: {self._column_list(table)}.", True
        if table.total_rows == 1 and table.rows:
            values = ", ".join(
                f"{column} = {_cell(value, self.s.cell_chars)}"
                for column, value in zip(table.columns[: self.s.brief_fields], table.rows[0], strict=False)
            )
            more = len(table.columns) - self.s.brief_fields
            return f"Found 1 row: {values}" + (
                f", … and {more} more columns." if more > 0 else "."
            ), more <= 0
        count = _count(table.total_rows, "row")
        if table.capped:
            count = f"at least {count} (the tool capped the result)"
        return f"Found {count}; columns: {self._column_list(table)}.", False

    def _table_preview(self, table: Table, max_rows: int) -> tuple[str, bool]:
        if not table.rows:
            return self._table_brief(table)
        shown = table.rows[:max_rows]
        lines = [self._table_heading(table)]
        if shown:
            lines.append(_markdown_table(table.columns, shown, self.s.cell_chars))
        if len(shown) < len(table.rows):
            lines.append(f"Showing the first {len(shown):,} of {len(table.rows):,} rows.")
        if table.capped or table.total_rows > len(table.rows):
            lines.append(self._capped_notice(table))
        complete = len(shown) == len(table.rows) and not _any_cell_cut(shown, self.s.cell_chars)
        return "\n\n".join(lines), complete

    def _table_heading(self, table: Table) -> str:
        rows = _count(table.total_rows, "row")
        if table.capped:
            rows = f"At least {rows}"
        return f"{rows} × {_count(len(table.columns), 'column')}: {self._column_list(table)}."

    def _capped_notice(self, table: Table) -> str:
        if table.capped:
            return (
                f"More rows exist than the {len(table.rows):,} returned (the tool capped the "
                "result); aggregate or filter to see the rest."
            )
        return f"The tool returned {len(table.rows):,} of {table.total_rows:,} rows."

    def _column_list(self, table: Table) -> str:
        names = table.columns[: self.s.brief_fields]
        if table.column_types:
            names = [f"{name} ({kind})" for name, kind in zip(names, table.column_types, strict=False)]
        more = len(table.columns) - len(names)
        return ", ".join(names) + (f", … and {more} more" if more > 0 else "")

    # -- objects, lists, text

    def _record_brief(self, record: Record) -> tuple[str, bool]:
        fields = list(record.fields.items())
        if not fields:
            return "Empty object.", True
        shown = fields[: self.s.brief_fields]
        parts = [f"{key} = {self._brief_value(value)}" for key, value in shown]
        complete = len(shown) == len(fields) and all(
            _is_scalar(value) and len(_cell(value, None)) <= self.s.cell_chars for _, value in shown
        )
        more = len(fields) - len(shown)
        tail = f", … and {more:,} more" if more > 0 else ""
        return f"Object with {_count(len(fields), 'field')}: " + ", ".join(parts) + tail + ".", complete

    def _brief_value(self, value: Any) -> str:
        if isinstance(value, list):
            return f"[{_count(len(value), 'item')}]"
        if isinstance(value, dict):
            return f"{{{_count(len(value), 'field')}}}"
        return _cell(value, self.s.cell_chars)

    def _items_brief(self, items: Items) -> tuple[str, bool]:
        count = len(items.items)
        if count == 0:
            return "Empty list.", True
        if not all(_is_scalar(item) for item in items.items):
            return f"List of {_count(count, 'item')}.", False
        shown = [_cell(item, self.s.cell_chars) for item in items.items[: self.s.brief_items]]
        more = count - len(shown)
        listing = ", ".join(shown) + (f", … and {more:,} more" if more > 0 else "")
        return f"List of {_count(count, 'item')}: {listing}.", more <= 0

    def _scalar_list(self, items: list[Any]) -> tuple[str, bool]:
        shown = items[: self.s.preview_items]
        lines = [f"List of {_count(len(items), 'item')}:"]
        lines += [f"- {_cell(item, self.s.string_chars)}" for item in shown]
        if len(items) > len(shown):
            lines.append(f"… and {len(items) - len(shown):,} more.")
        return "\n".join(lines), len(items) == len(shown)

    def _text_brief(self, text: Text) -> tuple[str, bool]:
        if len(text.text) <= self.s.brief_text_chars:
            return text.text, True
        return f"{text.text[: self.s.brief_text_chars]}… ({_text_facts(text.text)})", False

    def _trim(self, value: Any) -> tuple[Any, bool]:
        """A preview of JSON data: long lists, objects and strings cut, with markers."""
        if isinstance(value, str) and len(value) > self.s.string_chars:
            return (
                f"{value[: self.s.string_chars]}… ({len(value) - self.s.string_chars:,} more characters)",
                False,
            )
        if isinstance(value, list):
            trimmed = [self._trim(item) for item in value[: self.s.preview_items]]
            out = [item for item, _ in trimmed]
            if len(value) > len(out):
                out.append(f"… and {len(value) - len(out):,} more items")
            return out, len(value) == len(trimmed) and all(ok for _, ok in trimmed)
        if isinstance(value, dict):
            fields = list(value.items())[: self.s.preview_fields]
            trimmed_fields = {key: self._trim(item) for key, item in fields}
            result = {key: item for key, (item, _) in trimmed_fields.items()}
            if len(value) > len(fields):
                result["…"] = f"{len(value) - len(fields):,} more fields"
            return result, len(value) == len(fields) and all(ok for _, ok in trimmed_fields.values())
        return value, True


def _text_facts(text: str) -> str:
    lines = text.count("\n") + 1
    return f"{_count(len(text), 'character')}, {_count(lines, 'line')} in total"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2)


def _cell(value: Any, max_chars: int | None) -> str:
    """One value as table-cell / inline text: one line, pipes escaped, optionally cut."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    else:  # numbers, booleans, nested data: their JSON spelling
        text = json.dumps(value, ensure_ascii=False)
    text = " ".join(text.splitlines())
    if max_chars is not None and len(text) > max_chars:
        text = text[: max_chars - 1] + "…"
    return text.replace("|", "\\|")


def _any_cell_cut(rows: list[list[Any]], max_chars: int) -> bool:
    return any(len(_cell(value, None)) > max_chars for row in rows for value in row)


def _markdown_table(columns: list[str], rows: list[list[Any]], max_chars: int | None) -> str:
    lines = [
        "| " + " | ".join(_cell(column, max_chars) for column in columns) + " |",
        "|" + "|".join(" --- " for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(value, max_chars) for value in row) + " |" for row in rows]
    return "\n".join(lines)
