"""Rows to series: parse x values (time, number, category), pivot a `series` column, cap the
number of series and categories (the rest summed into "Other"). Pure Python, no matplotlib."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

from agent_core.charts.spec import OTHER, ChartType, MakeChartInput, XKind


class ChartDataError(ValueError):
    """The rows cannot be drawn as asked (missing column, no values…); the message says why."""


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Series:
    name: str
    values: list[float]  # aligned with Drawn.xs; NaN = no value
    axis: Literal["left", "right"] = "left"
    xs: list[Any] | None = None  # scatter only: the series' own x values

    @property
    def points(self) -> int:
        return sum(1 for v in self.values if not math.isnan(v))


@dataclass
class Drawn:
    x_name: str
    x_kind: XKind
    xs: list[Any]
    series: list[Series]
    notes: list[str] = field(default_factory=list)


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")


def to_number(value: Any) -> float | None:
    """A float for numbers and numeric text ('1,234.5' and '12%' included); None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float | Decimal):
        return float(value)
    if isinstance(value, str):
        text = value.strip().removesuffix("%")  # '12.5%' in a CSV is the number 12.5
        if _THOUSANDS.match(text):
            text = text.replace(",", "")
        try:
            return float(text)
        except ValueError:
            return None
    return None


def to_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str) and re.match(r"^\d{4}-\d{2}-\d{2}", value.strip()):
        try:
            return datetime.fromisoformat(value.strip()).replace(tzinfo=None)
        except ValueError:
            return None
    return None


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _column_index(table: Table, name: str) -> int:
    if name in table.columns:
        return table.columns.index(name)
    folded = [c.casefold() for c in table.columns]
    if name.casefold() in folded:
        return folded.index(name.casefold())
    raise ChartDataError(
        f"There is no column {name!r}. Columns: {', '.join(table.columns) or 'none'}.")


def _x_keys(raw: list[Any], chart_type: ChartType) -> tuple[XKind, list[Any]]:
    """Classify the x column and convert its values (None stays None)."""
    present = [v for v in raw if not _is_blank(v)]
    times = [to_time(v) for v in present]
    if present and all(t is not None for t in times):
        return "time", [None if _is_blank(v) else to_time(v) for v in raw]
    numbers = [to_number(v) for v in present]
    # Numbers on a bar axis are labels (store ids), not positions on a scale; so are years,
    # which a numeric axis would print as "2,026".
    numeric = bool(present) and all(n is not None for n in numbers)
    years = numeric and all(n is not None and n.is_integer() and 1900 <= n <= 2100 for n in numbers)
    if numeric and (chart_type == "scatter" or (chart_type == "line" and not years)):
        return "number", [None if _is_blank(v) else to_number(v) for v in raw]
    return "category", [None if _is_blank(v) else _category_label(v) for v in raw]


def _category_label(value: Any) -> str:
    number = to_number(value) if not isinstance(value, str) else None
    if number is not None and number.is_integer():
        return str(int(number))
    return str(value).strip()


def _y_values(table: Table, column: str) -> list[float]:
    index = _column_index(table, column)
    values: list[float] = []
    for row in table.rows:
        raw = row[index]
        number = to_number(raw)
        if number is None and not _is_blank(raw):
            raise ChartDataError(
                f"Column {table.columns[index]!r} is not numeric (it holds e.g. {raw!r}); "
                "y columns must contain numbers.")
        values.append(math.nan if number is None else number)
    return values


def shape(args: MakeChartInput, table: Table) -> Drawn:
    """Turn rows into ordered x values and aligned series, applying the 'Other' caps."""
    if not table.rows:
        raise ChartDataError("There are no rows to chart.")
    x_index = _column_index(table, args.x)
    x_kind, x_keys = _x_keys([row[x_index] for row in table.rows], args.chart_type)
    notes: list[str] = []
    if x_kind == "category" and args.chart_type == "scatter":
        raise ChartDataError(
            f"A scatter chart needs a numeric or date x column; {args.x!r} holds text. Use a bar "
            "chart for categories.")
    skipped = sum(1 for k in x_keys if k is None)
    if skipped:
        notes.append(f"{skipped} row(s) without an x value were left out.")

    # (series name, axis, y values per row)
    columns: list[tuple[str, Literal["left", "right"], list[float]]]
    if args.series is not None:
        s_index = _column_index(table, args.series)
        values = _y_values(table, args.y[0])
        names = [
            "(blank)" if _is_blank(row[s_index]) else _category_label(row[s_index])
            for row in table.rows
        ]
        columns = [
            (
                name,
                "left",
                [v if n == name else math.nan for v, n in zip(values, names, strict=True)],
            )
            for name in dict.fromkeys(names)
        ]
    else:
        columns = [
            (table.columns[_column_index(table, c)], "left", _y_values(table, c)) for c in args.y
        ]
        columns += [
            (table.columns[_column_index(table, c)], "right", _y_values(table, c))
            for c in args.y2 or []
        ]

    if args.chart_type == "scatter":
        series = []
        for name, axis, ys in columns:
            points = [
                (key, value)
                for key, value in zip(x_keys, ys, strict=True)
                if key is not None and not math.isnan(value)
            ]
            if points:
                series.append(
                    Series(
                        name=name,
                        axis=axis,
                        xs=[key for key, _ in points],
                        values=[value for _, value in points],
                    )
                )
        xs = sorted({x for s in series for x in s.xs or []})
        drawn = Drawn(table.columns[x_index], x_kind, xs, series, notes)
        return _cap_scatter_series(drawn, args.max_categories)

    xs = list(dict.fromkeys(k for k in x_keys if k is not None))
    if x_kind != "category":
        xs.sort()
    position = {x: i for i, x in enumerate(xs)}
    merged = False
    series = []
    for name, axis, ys in columns:
        sums = [math.nan] * len(xs)
        for key, value in zip(x_keys, ys, strict=True):
            if key is None or math.isnan(value):
                continue
            i = position[key]
            merged = merged or not math.isnan(sums[i])
            sums[i] = value if math.isnan(sums[i]) else sums[i] + value
        series.append(Series(name=name, axis=axis, values=sums))
    if merged:
        notes.append("Rows sharing the same x value (and series) were summed.")
    drawn = Drawn(table.columns[x_index], x_kind, xs, [s for s in series if s.points], notes)
    drawn = _cap_series(drawn, args.max_categories)
    if x_kind == "category" and args.chart_type in ("bar", "stacked_bar", "combo"):
        drawn = _cap_categories(drawn, args.max_categories)
    return drawn


def _magnitude(values: Sequence[float]) -> float:
    return sum(abs(v) for v in values if not math.isnan(v))


def _nansum(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) if present else math.nan


def _cap_series(drawn: Drawn, limit: int) -> Drawn:
    """Keep the `limit - 1` largest left-axis series; sum the rest into 'Other'."""
    left = [s for s in drawn.series if s.axis == "left"]
    if len(left) <= limit:
        return drawn
    ranked = sorted(left, key=lambda s: _magnitude(s.values), reverse=True)
    kept, rest = ranked[: limit - 1], ranked[limit - 1 :]
    other = Series(
        name=OTHER, values=[_nansum(col) for col in zip(*(s.values for s in rest), strict=True)]
    )
    drawn.series = (
        [s for s in left if s in kept] + [other] + [s for s in drawn.series if s.axis == "right"]
    )
    drawn.notes.append(f"{len(rest)} smaller series were summed into '{OTHER}'.")
    return drawn


def _cap_scatter_series(drawn: Drawn, limit: int) -> Drawn:
    if len(drawn.series) <= limit:
        return drawn
    ranked = sorted(drawn.series, key=lambda s: len(s.values), reverse=True)
    kept, rest = ranked[: limit - 1], ranked[limit - 1 :]
    other = Series(
        name=OTHER,
        xs=[x for s in rest for x in s.xs or []],
        values=[v for s in rest for v in s.values],
    )
    drawn.series = [s for s in drawn.series if s in kept] + [other]
    drawn.notes.append(f"Points of {len(rest)} smaller series are shown together as '{OTHER}'.")
    return drawn


def _cap_categories(drawn: Drawn, limit: int) -> Drawn:
    """Keep the `limit - 1` largest categories (by left-axis total), in their original order;
    sum the rest into 'Other'. Right-axis lines are often rates, which cannot be summed, so
    their 'Other' point stays empty."""
    if len(drawn.xs) <= limit:
        return drawn
    left = [s for s in drawn.series if s.axis == "left"]
    totals = [_magnitude([s.values[i] for s in left]) for i in range(len(drawn.xs))]
    ranked = sorted(range(len(drawn.xs)), key=lambda i: totals[i], reverse=True)
    keep = sorted(ranked[: limit - 1])
    rest = sorted(ranked[limit - 1 :])
    for s in drawn.series:
        other = _nansum([s.values[i] for i in rest]) if s.axis == "left" else math.nan
        s.values = [s.values[i] for i in keep] + [other]
    drawn.xs = [drawn.xs[i] for i in keep] + [OTHER]
    drawn.notes.append(f"{len(rest)} smaller categories were summed into '{OTHER}'.")
    return drawn
