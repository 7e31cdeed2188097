"""`make_chart`: a PNG chart from a SQL query or a data file, posted into the conversation.

Charts are drawn with matplotlib's Agg canvas on plain ``Figure`` objects (never pyplot, whose
global figure registry is not thread-safe), 1200×700 px at 150 dpi with fonts sized to stay
readable when a chat client shows the image at half size.

Chinese text needs a CJK font. The project depends on ``noto-cjk-sans-otc``, a wheel that ships
Noto Sans CJK (SIL OFL) as a file inside the package, so nothing is downloaded at run time; it is
registered with matplotlib's font manager when this module is imported. Fonts already on the
machine (matplotlib's font list, then fontconfig) are the fallback if that package is missing.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import logging
import math
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal

import matplotlib
from matplotlib import dates as mdates
from matplotlib import font_manager, ticker
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, Field, field_validator, model_validator

from agent_core.messages import OutboundFile
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError
from agent_core.tools.data_files import decode_text, file_suffix, read_data_file
from agent_core.tools.files import conversation_workspace, workspace_errors
from agent_core.tools.sql import query_conversation_data

log = logging.getLogger(__name__)

WIDTH_PX = 1200
HEIGHT_PX = 700
DPI = 150
MAX_CHART_ROWS = 10_000
MAX_DATA_FILE_BYTES = 20 * 1024 * 1024
OTHER = "Other"

ChartType = Literal["line", "bar", "stacked_bar", "scatter", "combo"]
XKind = Literal["time", "number", "category"]


# --- CJK font --------------------------------------------------------------------------------

# Families able to show Simplified Chinese, best first. Noto Sans CJK SC comes with the
# noto-cjk-sans-otc dependency; the others are common system fonts (Debian, macOS, Windows).
CJK_FAMILIES: tuple[str, ...] = (
    "Noto Sans CJK SC",
    "Source Han Sans SC",
    "Noto Sans SC",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Microsoft YaHei",
    "PingFang SC",
    "SimHei",
    # matplotlib < 3.11 only sees the first face of a .ttc collection: the JP face of the
    # bundled font, whose Han glyphs still cover Chinese.
    "Noto Sans CJK JP",
)
# Characters every chart label in Chinese is likely to need; a font must have all of them.
CJK_PROBE_TEXT = "销售额订单数环比同比增长华东华北华南西部中部地区渠道品类月份合计其他"


def font_covers(family: str, text: str) -> bool:
    """True if the font matplotlib uses for ``family`` has a real glyph for every character.

    A missing glyph has index 0 (".notdef"), which is what renders as a tofu box.
    """
    try:
        path = font_manager.findfont(
            font_manager.FontProperties(family=family), fallback_to_default=False
        )
    except ValueError:
        return False
    font = font_manager.get_font(path)
    return all(font.get_char_index(ord(ch)) != 0 for ch in text if not ch.isspace())


def _register_bundled_font() -> None:
    try:
        import noto_cjk_sans_otc
    except ImportError:
        return
    try:
        font_manager.fontManager.addfont(str(noto_cjk_sans_otc.FONT_PATH))
    except (OSError, RuntimeError) as exc:  # an unreadable or truncated font file
        log.warning("could not load the bundled CJK font: %s", exc)


def _fontconfig_cjk_families() -> list[str]:
    """Register fonts fontconfig reports for Chinese and return their family names.

    Needed because matplotlib caches its system font list: a font installed after the cache
    was built (e.g. ``apt-get install fonts-wqy-microhei``) is otherwise invisible to it.
    """
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        return []
    try:
        listing = subprocess.run(
            [fc_list, ":lang=zh", "file"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    families: list[str] = []
    for path in sorted({line.split(":")[0].strip() for line in listing.splitlines()} - {""}):
        try:
            font_manager.fontManager.addfont(path)
            families.append(font_manager.get_font(path).family_name)
        except (OSError, RuntimeError, ValueError):
            continue
    return families


def _find_cjk_family() -> str | None:
    _register_bundled_font()
    known = {entry.name for entry in font_manager.fontManager.ttflist}
    for family in CJK_FAMILIES:
        if family in known and font_covers(family, CJK_PROBE_TEXT):
            return family
    for family in _fontconfig_cjk_families():
        if font_covers(family, CJK_PROBE_TEXT):
            return family
    log.warning(
        "no CJK font found: Chinese text in charts will show as boxes; install the "
        "noto-cjk-sans-otc package (or Debian's fonts-wqy-microhei)"
    )
    return None


CJK_FONT_FAMILY: str | None = _find_cjk_family()


# --- input -----------------------------------------------------------------------------------


class ChartAnnotation(BaseModel):
    x: str = Field(
        ...,
        min_length=1,
        max_length=80,
        description="The x value to mark, written as in the data: a date ('2026-10-20'), a "
        "number or a category name.",
    )
    label: str = Field(..., min_length=1, max_length=40, description="Short text, e.g. 'App故障'.")


class MakeChartInput(BaseModel):
    chart_type: ChartType = Field(
        ...,
        description=(
            "line: trends over time or an ordered axis. bar: compare categories (several y "
            "columns or a `series` column give grouped bars). stacked_bar: parts of a total per "
            "category. scatter: relation between two numeric columns. combo: bars of `y` on the "
            "left axis plus lines of `y2` on a right axis (e.g. GMV bars with an order-count or "
            "growth-rate line)."
        ),
    )
    title: str = Field(
        ...,
        min_length=1,
        max_length=120,
        description="Chart title in the user's language; best stated as the takeaway, e.g. "
        "'华东区App渠道GMV在10月20–22日下跌约40%'.",
    )
    subtitle: str | None = Field(
        None,
        max_length=160,
        description="Smaller line under the title: period, filters, unit, e.g. "
        "'2026-10-01 至 2026-10-31，单位：元'.",
    )
    sql: str | None = Field(
        None,
        max_length=20_000,
        description="A read-only DuckDB query producing the chart's rows (uploads by plain name, "
        "demo data as demo.sales). Aggregate in SQL: one row per point, at most 10,000 rows. "
        "Give exactly one of `sql` or `data_file`.",
    )
    data_file: str | None = Field(
        None,
        max_length=1024,
        description="A CSV/TSV or JSON file under /data or /uploads holding the rows, with a "
        "header row (CSV) or a list of objects (JSON).",
    )
    x: str = Field(..., min_length=1, description="Column for the horizontal axis.")
    y: list[str] = Field(
        ...,
        min_length=1,
        max_length=12,
        description="Numeric column(s) to plot; each becomes a series (for combo: the bars). "
        "A single column name is accepted too.",
    )
    y2: list[str] | None = Field(
        None,
        max_length=6,
        description="combo only: numeric column(s) drawn as lines on the right-hand axis.",
    )
    series: str | None = Field(
        None,
        description="Column whose distinct values become separate series (long format, e.g. "
        "region), used with exactly one `y` column. Not for combo.",
    )
    x_label: str | None = Field(None, max_length=80, description="Horizontal axis label.")
    y_label: str | None = Field(None, max_length=80, description="Left axis label (with unit).")
    y2_label: str | None = Field(None, max_length=80, description="Right axis label (combo).")
    horizontal: bool = Field(
        False,
        description="bar / stacked_bar only: draw bars horizontally, categories listed top "
        "down in data order. Better for long category names or more than 7 bars.",
    )
    annotations: list[ChartAnnotation] = Field(
        default_factory=list,
        max_length=6,
        description="Events to mark with a dashed line and a short label (an anomaly, a "
        "launch, a campaign start).",
    )
    max_categories: int = Field(
        12,
        ge=2,
        le=30,
        description="Most bar categories and most series shown; the smallest of the rest are "
        "summed into 'Other'.",
    )

    @field_validator("y", "y2", mode="before")
    @classmethod
    def _one_column_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _consistent(self) -> MakeChartInput:
        if (self.sql is None) == (self.data_file is None):
            raise ValueError("give exactly one of `sql` or `data_file`")
        if self.chart_type == "combo" and not self.y2:
            raise ValueError("a combo chart needs `y2`: the column(s) drawn as lines")
        if self.chart_type != "combo" and self.y2:
            raise ValueError("`y2` (right-hand axis) is only used by combo charts")
        if self.horizontal and self.chart_type not in ("bar", "stacked_bar"):
            raise ValueError("`horizontal` applies to bar and stacked_bar charts only")
        if self.series is not None:
            if self.chart_type == "combo":
                raise ValueError("combo charts take `y` and `y2` columns, not a `series` column")
            if len(self.y) != 1:
                raise ValueError("with a `series` column, give exactly one `y` column")
        return self


# --- result ----------------------------------------------------------------------------------


class ChartSeries(BaseModel):
    name: str
    axis: Literal["left", "right"] = "left"
    points: int  # values actually drawn (missing ones are skipped)


class ChartResult(BaseModel):
    """What was drawn; the PNG itself is posted to the conversation."""

    path: str  # virtual path in the workspace, e.g. /charts/daily-gmv-3f2a9c1b0d.png
    chart_type: ChartType
    title: str
    x: str
    x_kind: XKind
    categories: int  # distinct x values drawn
    series: list[ChartSeries]
    points: int
    width_px: int = WIDTH_PX
    height_px: int = HEIGHT_PX
    notes: list[str] = Field(default_factory=list)


# --- tool ------------------------------------------------------------------------------------


class MakeChartTool(Tool):
    name = "make_chart"
    description = (
        "Draw a chart (line, bar, stacked_bar, scatter or combo bar+line with two axes) from a "
        "DuckDB query or a CSV/JSON file in /data or /uploads, save it as a PNG in /charts and "
        "post it into this conversation. Chinese labels are supported. Shape the data first: "
        "one row per point, x column plus numeric y column(s). Mention the chart in your answer "
        "instead of repeating all its numbers."
    )
    Input = MakeChartInput
    timeout_s = 90.0
    # Charts are drawn one at a time (see _render_lock) into distinct files.
    concurrency_safe = True

    async def run(self, args: MakeChartInput, ctx: ToolContext) -> Any:  # type: ignore[override]
        if args.sql is not None:
            result = await query_conversation_data(
                ctx, args.sql, max_rows=MAX_CHART_ROWS, byte_cap=50_000_000
            )
            if result.truncated:
                raise ToolError(
                    f"The query returned more than {MAX_CHART_ROWS:,} rows, too many to chart. "
                    "Aggregate it (GROUP BY day, week, region …) to one row per point.",
                    ErrorType.INVALID_PARAMETERS,
                )
            table = _Table(columns=result.columns, rows=result.rows)
        else:
            table = await _load_data_file(ctx, args.data_file or "")
        png, drawn = await asyncio.to_thread(_render, args, table)
        digest = hashlib.sha256(png).hexdigest()[:10]
        vpath = f"/charts/{slugify(args.title, 'chart')}-{digest}.png"
        workspace = conversation_workspace(ctx)
        with workspace_errors():
            # Same name means same bytes, so replacing an earlier identical chart is harmless.
            await workspace.write(vpath, png, overwrite=True)
            real = await workspace.real_path(vpath)
        ctx.produced_files.append(
            OutboundFile(path=str(real), title=args.title, mime_type="image/png")
        )
        return ChartResult(
            path=vpath,
            chart_type=args.chart_type,
            title=args.title,
            x=drawn.x_name,
            x_kind=drawn.x_kind,
            categories=len(drawn.xs),
            series=[ChartSeries(name=s.name, axis=s.axis, points=s.points) for s in drawn.series],
            points=sum(s.points for s in drawn.series),
            notes=drawn.notes,
        )


def slugify(text: str, default: str) -> str:
    """A short file-name stem from free text; keeps letters of any script (Chinese too)."""
    slug = re.sub(r"[^\w]+", "-", text.lower()).strip("-_")[:60].strip("-_")
    return slug or default


# --- loading data ----------------------------------------------------------------------------


@dataclass
class _Table:
    columns: list[str]
    rows: list[list[Any]]


async def _load_data_file(ctx: ToolContext, path: str) -> _Table:
    vpath, raw = await read_data_file(ctx, path, MAX_DATA_FILE_BYTES)
    return await asyncio.to_thread(_parse_data_file, vpath, raw)


def _parse_data_file(vpath: str, raw: bytes) -> _Table:
    suffix = file_suffix(vpath)
    text = decode_text(vpath, raw)
    if suffix in ("csv", "tsv", "txt"):
        table = _parse_csv(text, "\t" if suffix == "tsv" else None)
    elif suffix in ("json", "jsonl", "ndjson"):
        table = _parse_json(text, vpath, lines=suffix != "json")
    else:
        raise ToolError(
            f"{vpath}: charts read .csv, .tsv or .json files (uploaded spreadsheets are tables: "
            "use `sql` instead).",
            ErrorType.INVALID_PARAMETERS,
        )
    if not table.columns:
        raise ToolError(f"{vpath} has no columns.", ErrorType.INVALID_PARAMETERS)
    if len(table.rows) > MAX_CHART_ROWS:
        raise ToolError(
            f"{vpath} has more than {MAX_CHART_ROWS:,} rows, too many to chart; aggregate first.",
            ErrorType.INVALID_PARAMETERS,
        )
    return table


def _parse_csv(text: str, delimiter: str | None) -> _Table:
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, [])
    width = len(header)
    rows = [(row + [None] * width)[:width] for row in reader if any(cell.strip() for cell in row)]
    return _Table(columns=[h.strip() for h in header], rows=rows)


def _parse_json(text: str, vpath: str, *, lines: bool) -> _Table:
    try:
        data: Any = (
            [json.loads(line) for line in text.splitlines() if line.strip()]
            if lines
            else json.loads(text)
        )
    except json.JSONDecodeError as exc:
        raise ToolError(f"{vpath} is not valid JSON: {exc}", ErrorType.INVALID_PARAMETERS) from exc
    # The shape sql_query returns ({"columns": [...], "rows": [[...]]}) is accepted as is.
    if isinstance(data, dict) and isinstance(data.get("columns"), list) and "rows" in data:
        return _Table(columns=[str(c) for c in data["columns"]], rows=list(data["rows"]))
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else data
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise ToolError(
            f"{vpath}: expected a list of objects (one per row), or "
            '{"columns": [...], "rows": [[...], ...]}.',
            ErrorType.INVALID_PARAMETERS,
        )
    columns = list(dict.fromkeys(key for item in data for key in item))
    return _Table(columns=columns, rows=[[item.get(c) for c in columns] for item in data])


# --- shaping data ----------------------------------------------------------------------------


@dataclass
class _Series:
    name: str
    values: list[float]  # aligned with _Drawn.xs; NaN = no value
    axis: Literal["left", "right"] = "left"
    xs: list[Any] | None = None  # scatter only: the series' own x values

    @property
    def points(self) -> int:
        return sum(1 for v in self.values if not math.isnan(v))


@dataclass
class _Drawn:
    x_name: str
    x_kind: XKind
    xs: list[Any]
    series: list[_Series]
    notes: list[str] = field(default_factory=list)


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")


def _to_number(value: Any) -> float | None:
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


def _to_time(value: Any) -> datetime | None:
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


def _column_index(table: _Table, name: str) -> int:
    if name in table.columns:
        return table.columns.index(name)
    folded = [c.casefold() for c in table.columns]
    if name.casefold() in folded:
        return folded.index(name.casefold())
    raise ToolError(
        f"There is no column {name!r}. Columns: {', '.join(table.columns) or 'none'}.",
        ErrorType.INVALID_PARAMETERS,
    )


def _x_keys(raw: list[Any], chart_type: ChartType) -> tuple[XKind, list[Any]]:
    """Classify the x column and convert its values (None stays None)."""
    present = [v for v in raw if not _is_blank(v)]
    times = [_to_time(v) for v in present]
    if present and all(t is not None for t in times):
        return "time", [None if _is_blank(v) else _to_time(v) for v in raw]
    numbers = [_to_number(v) for v in present]
    # Numbers on a bar axis are labels (store ids), not positions on a scale; so are years,
    # which a numeric axis would print as "2,026".
    numeric = bool(present) and all(n is not None for n in numbers)
    years = numeric and all(n.is_integer() and 1900 <= n <= 2100 for n in numbers)
    if numeric and (chart_type == "scatter" or (chart_type == "line" and not years)):
        return "number", [None if _is_blank(v) else _to_number(v) for v in raw]
    return "category", [None if _is_blank(v) else _category_label(v) for v in raw]


def _category_label(value: Any) -> str:
    number = _to_number(value) if not isinstance(value, str) else None
    if number is not None and number.is_integer():
        return str(int(number))
    return str(value).strip()


def _y_values(table: _Table, column: str) -> list[float]:
    index = _column_index(table, column)
    values: list[float] = []
    for row in table.rows:
        raw = row[index]
        number = _to_number(raw)
        if number is None and not _is_blank(raw):
            raise ToolError(
                f"Column {table.columns[index]!r} is not numeric (it holds e.g. {raw!r}); "
                "y columns must contain numbers.",
                ErrorType.INVALID_PARAMETERS,
            )
        values.append(math.nan if number is None else number)
    return values


def _shape(args: MakeChartInput, table: _Table) -> _Drawn:
    """Turn rows into ordered x values and aligned series, applying the 'Other' caps."""
    if not table.rows:
        raise ToolError("There are no rows to chart.", ErrorType.INVALID_PARAMETERS)
    x_index = _column_index(table, args.x)
    x_kind, x_keys = _x_keys([row[x_index] for row in table.rows], args.chart_type)
    notes: list[str] = []
    if x_kind == "category" and args.chart_type == "scatter":
        raise ToolError(
            f"A scatter chart needs a numeric or date x column; {args.x!r} holds text. Use a bar "
            "chart for categories.",
            ErrorType.INVALID_PARAMETERS,
        )
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
                    _Series(
                        name=name,
                        axis=axis,
                        xs=[key for key, _ in points],
                        values=[value for _, value in points],
                    )
                )
        xs = sorted({x for s in series for x in s.xs or []})
        drawn = _Drawn(table.columns[x_index], x_kind, xs, series, notes)
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
        series.append(_Series(name=name, axis=axis, values=sums))
    if merged:
        notes.append("Rows sharing the same x value (and series) were summed.")
    drawn = _Drawn(table.columns[x_index], x_kind, xs, [s for s in series if s.points], notes)
    drawn = _cap_series(drawn, args.max_categories)
    if x_kind == "category" and args.chart_type in ("bar", "stacked_bar", "combo"):
        drawn = _cap_categories(drawn, args.max_categories)
    return drawn


def _magnitude(values: Sequence[float]) -> float:
    return sum(abs(v) for v in values if not math.isnan(v))


def _nansum(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) if present else math.nan


def _cap_series(drawn: _Drawn, limit: int) -> _Drawn:
    """Keep the `limit - 1` largest left-axis series; sum the rest into 'Other'."""
    left = [s for s in drawn.series if s.axis == "left"]
    if len(left) <= limit:
        return drawn
    ranked = sorted(left, key=lambda s: _magnitude(s.values), reverse=True)
    kept, rest = ranked[: limit - 1], ranked[limit - 1 :]
    other = _Series(
        name=OTHER, values=[_nansum(col) for col in zip(*(s.values for s in rest), strict=True)]
    )
    drawn.series = (
        [s for s in left if s in kept] + [other] + [s for s in drawn.series if s.axis == "right"]
    )
    drawn.notes.append(f"{len(rest)} smaller series were summed into '{OTHER}'.")
    return drawn


def _cap_scatter_series(drawn: _Drawn, limit: int) -> _Drawn:
    if len(drawn.series) <= limit:
        return drawn
    ranked = sorted(drawn.series, key=lambda s: len(s.values), reverse=True)
    kept, rest = ranked[: limit - 1], ranked[limit - 1 :]
    other = _Series(
        name=OTHER,
        xs=[x for s in rest for x in s.xs or []],
        values=[v for s in rest for v in s.values],
    )
    drawn.series = [s for s in drawn.series if s in kept] + [other]
    drawn.notes.append(f"Points of {len(rest)} smaller series are shown together as '{OTHER}'.")
    return drawn


def _cap_categories(drawn: _Drawn, limit: int) -> _Drawn:
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


# --- drawing ---------------------------------------------------------------------------------

_PALETTE = (
    "#2F6DB5",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#76B7B2",
    "#EDC948",
    "#B07AA1",
    "#FF9DA7",
    "#9C755F",
    "#4E79A7",
    "#86BCB6",
    "#D4A6C8",
)
_OTHER_COLOR = "#B0B0B0"
_NEGATIVE_COLOR = "#D1495B"
_MARK_COLOR = "#555555"
_MAX_SHORT_TICK_LABELS = 20
_MAX_LONG_TICK_LABELS = 12  # labels longer than 6 characters are rotated and take more room
_MAX_ROW_TICK_LABELS = 30  # horizontal bars: labels stacked vertically, never rotated
# matplotlib's rcParams are process-global and not thread-safe; charts are drawn one at a time.
_render_lock = threading.Lock()


def _style() -> dict[str, Any]:
    families = [CJK_FONT_FAMILY, "DejaVu Sans"] if CJK_FONT_FAMILY else ["DejaVu Sans"]
    return {
        # Named families rather than "sans-serif", so each text keeps them outside this style
        # context too. The CJK font also has Latin glyphs; DejaVu Sans fills in anything missing.
        "font.family": families,
        "font.size": 12,
        # No bold anywhere: the bundled CJK font has a regular weight only.
        "figure.titlesize": 17,
        "axes.titlesize": 12.5,
        "axes.titlecolor": "#555555",
        "axes.titlelocation": "left",
        "axes.labelsize": 13,
        "axes.labelcolor": "#333333",
        "xtick.labelsize": 11.5,
        "ytick.labelsize": 11.5,
        "xtick.color": "#444444",
        "ytick.color": "#444444",
        "legend.fontsize": 11.5,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "#888888",
        "axes.grid": False,  # switched on per chart, for the value axis only
        "grid.color": "#DDDDDD",
        "grid.linewidth": 0.8,
        "axes.axisbelow": True,
        "lines.linewidth": 2.4,
        "figure.facecolor": "white",
    }


def format_number(value: float, _position: Any = None) -> str:
    """Axis and label text of a number: thousands separators, at most two decimals."""
    if not math.isfinite(value):
        return ""
    if abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _time_labels(xs: Sequence[datetime]) -> list[str]:
    with_time = any((x.hour, x.minute, x.second) != (0, 0, 0) for x in xs)
    return [x.strftime("%Y-%m-%d %H:%M" if with_time else "%Y-%m-%d") for x in xs]


def _color(series: _Series, index: int) -> str:
    return _OTHER_COLOR if series.name == OTHER else _PALETTE[index % len(_PALETTE)]


def _render(args: MakeChartInput, table: _Table) -> tuple[bytes, _Drawn]:
    """Shape the data and draw it; returns the PNG bytes and what was drawn."""
    drawn = _shape(args, table)
    if not drawn.series:
        raise ToolError(
            "None of the y values are present: nothing to draw.", ErrorType.INVALID_PARAMETERS
        )
    with _render_lock, matplotlib.rc_context(_style()):
        fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        if args.chart_type == "scatter":
            axes = _draw_scatter(ax, drawn)
        elif args.chart_type == "line":
            axes = _draw_lines(ax, drawn)
        else:
            axes = _draw_bars(
                ax, drawn, stacked=args.chart_type == "stacked_bar", horizontal=args.horizontal
            )
        # The figure title spans the whole width; the subtitle sits just above the plot.
        fig.suptitle(args.title, x=0.01, horizontalalignment="left")
        if args.subtitle:
            ax.set_title(args.subtitle)
        category_axis, value_axis = (
            (ax.yaxis, ax.xaxis) if args.horizontal else (ax.xaxis, ax.yaxis)
        )
        category_axis.set_label_text(args.x_label or drawn.x_name)
        value_axis.set_label_text(args.y_label or (args.y[0] if len(args.y) == 1 else ""))
        value_axis.set_major_formatter(ticker.FuncFormatter(format_number))
        ax.grid(True, axis="x" if args.horizontal else "y")
        if len(axes) > 1:
            axes[1].set_ylabel(args.y2_label or ", ".join(args.y2 or []))
            axes[1].yaxis.set_major_formatter(ticker.FuncFormatter(format_number))
        for annotation in args.annotations:
            if not _annotate(ax, drawn, annotation, args):
                drawn.notes.append(f"Annotation at {annotation.x!r} is not on the x axis.")
        # Stacked bars list their legend in the order the segments are stacked.
        _legend(fig, axes, reverse=args.chart_type == "stacked_bar" and not args.horizontal)
        buffer = io.BytesIO()
        # No run-time metadata (software version), so equal charts give equal bytes and names.
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue(), drawn


def _draw_lines(ax: Axes, drawn: _Drawn) -> list[Axes]:
    if drawn.x_kind == "category":
        positions: list[Any] = list(range(len(drawn.xs)))
        _category_ticks(ax, [str(x) for x in drawn.xs], horizontal=False)
    else:
        positions = drawn.xs
    few_points = len(drawn.xs) <= 40
    for i, s in enumerate(drawn.series):
        ax.plot(
            positions,
            s.values,
            label=s.name,
            color=_color(s, i),
            marker="o" if few_points else None,
            markersize=4.5,
        )
    _numeric_x_axis(ax, drawn.x_kind)
    return [ax]


def _draw_scatter(ax: Axes, drawn: _Drawn) -> list[Axes]:
    for i, s in enumerate(drawn.series):
        ax.scatter(s.xs, s.values, label=s.name, color=_color(s, i), s=36, alpha=0.75, linewidths=0)
    ax.grid(True, axis="both")
    _numeric_x_axis(ax, drawn.x_kind)
    return [ax]


def _numeric_x_axis(ax: Axes, x_kind: XKind) -> None:
    if x_kind == "time":
        _time_axis(ax)
    elif x_kind == "number":
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(format_number))


def _draw_bars(ax: Axes, drawn: _Drawn, *, stacked: bool, horizontal: bool) -> list[Axes]:
    """Bars of the left-axis series (grouped or stacked) and lines of right-axis ones (combo)."""
    labels = _time_labels(drawn.xs) if drawn.x_kind == "time" else [str(x) for x in drawn.xs]
    positions = list(range(len(labels)))
    bars = [s for s in drawn.series if s.axis == "left"]
    lines = [s for s in drawn.series if s.axis == "right"]

    def draw(
        offsets: list[float], values: list[float], size: float, base: list[float], **kw: Any
    ) -> Any:
        if horizontal:
            return ax.barh(offsets, values, height=size, left=base, **kw)
        return ax.bar(offsets, values, width=size, bottom=base, **kw)

    group_width = 0.8
    size = group_width if stacked or len(bars) == 1 else group_width / len(bars)
    above = [0.0] * len(positions)  # stacked bars: positive and negative values stack apart
    below = [0.0] * len(positions)
    for i, s in enumerate(bars):
        values = [0.0 if math.isnan(v) else v for v in s.values]
        color: Any = _color(s, i)
        if len(bars) == 1 and any(v < 0 for v in values):
            # A change-by-segment chart: gains and losses in different colours.
            color = [_NEGATIVE_COLOR if v < 0 else color for v in values]
        if stacked:
            bases = [b if v >= 0 else n for v, b, n in zip(values, above, below, strict=True)]
            container = draw(positions, values, size, bases, label=s.name, color=color)
            above = [b + max(v, 0) for v, b in zip(values, above, strict=True)]
            below = [n + min(v, 0) for v, n in zip(values, below, strict=True)]
        else:
            offset = (i - (len(bars) - 1) / 2) * size
            container = draw(
                [p + offset for p in positions],
                values,
                size,
                [0.0] * len(values),
                label=s.name,
                color=color,
            )
        if len(bars) == 1 and not lines and len(positions) <= 15:
            value_labels = [format_number(v) for v in values]
            ax.bar_label(container, labels=value_labels, padding=2, fontsize=10)
    _category_ticks(ax, labels, horizontal=horizontal)
    if not lines:
        return [ax]
    right = ax.twinx()
    right.spines["right"].set_visible(True)
    for i, s in enumerate(lines, start=len(bars)):
        right.plot(positions, s.values, label=s.name, color=_color(s, i), marker="o", markersize=5)
    lowest = min((v for s in lines for v in s.values if not math.isnan(v)), default=0.0)
    right.set_ylim(bottom=min(0.0, lowest))
    return [ax, right]


def _category_ticks(ax: Axes, labels: list[str], *, horizontal: bool) -> None:
    longest = max((len(label) for label in labels), default=0)
    if horizontal:
        most = _MAX_ROW_TICK_LABELS
    else:
        most = _MAX_SHORT_TICK_LABELS if longest <= 6 else _MAX_LONG_TICK_LABELS
    step = max(1, math.ceil(len(labels) / most))
    ticks = list(range(0, len(labels), step))
    if horizontal:
        ax.set_yticks(ticks, [labels[t] for t in ticks])
        ax.set_ylim(len(labels) - 0.4, -0.6)  # first category on top
        return
    ax.set_xticks(ticks, [labels[t] for t in ticks])
    if len(ticks) > 6 or longest > 10:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")
    ax.set_xlim(-0.6, len(labels) - 0.4)


def _time_axis(ax: Axes) -> None:
    """Concise date ticks in numeric form (no English month names in a Chinese chart)."""
    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(
        mdates.ConciseDateFormatter(
            locator,
            formats=["%Y", "%Y-%m", "%m-%d", "%H:%M", "%H:%M", "%S.%f"],
            zero_formats=["", "%Y", "%Y-%m", "%m-%d", "%H:%M", "%H:%M"],
            offset_formats=["", "%Y", "%Y", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"],
        )
    )


def _annotation_position(drawn: _Drawn, x: str, on_positions: bool) -> Any:
    """Where ``x`` is on the drawn axis: a datetime or number on a scale, or the index of the
    category (``on_positions``: bars and category lines), or None if it is not there."""
    if drawn.x_kind == "time":
        when = _to_time(x)
        if when is None:
            return None
        if not on_positions:
            return when
        return drawn.xs.index(when) if when in drawn.xs else None
    if drawn.x_kind == "number" and not on_positions:
        return _to_number(x)
    labels = [str(v) for v in drawn.xs]
    return labels.index(x.strip()) if x.strip() in labels else None


def _annotate(ax: Axes, drawn: _Drawn, annotation: ChartAnnotation, args: MakeChartInput) -> bool:
    """Draw a dashed marker with a label at the annotation's x; False if x is not on the axis."""
    on_positions = args.chart_type in ("bar", "stacked_bar", "combo") or drawn.x_kind == "category"
    where = _annotation_position(drawn, annotation.x, on_positions)
    if where is None:
        return False
    style = {"color": _MARK_COLOR, "linestyle": "--", "linewidth": 1.2, "zorder": 3}
    text_style = {"color": _MARK_COLOR, "fontsize": 10.5, "textcoords": "offset points"}
    if args.horizontal:
        ax.axhline(where, **style)
        ax.annotate(
            annotation.label,
            xy=(1, where),
            xycoords=("axes fraction", "data"),
            xytext=(-4, -3),
            ha="right",
            va="top",
            **text_style,
        )
    else:
        ax.axvline(where, **style)
        ax.annotate(
            annotation.label,
            xy=(where, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -4),
            ha="left",
            va="top",
            **text_style,
        )
    return True


def _legend(fig: Figure, axes: list[Axes], *, reverse: bool) -> None:
    handles, labels = [], []
    for axis in axes:
        h, lab = axis.get_legend_handles_labels()
        handles += h
        labels += lab
    if len(handles) <= 1 and len(axes) == 1:
        return  # one series: the axis label says what it is
    # Outside the plot so it never covers data: a column beside it for many or long names, a
    # row under it for a few short ones.
    if len(handles) > 4 or sum(len(label) for label in labels) > 40:
        fig.legend(handles, labels, loc="outside right upper", reverse=reverse)
    else:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), reverse=reverse)
