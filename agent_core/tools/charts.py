"""`make_chart`: a PNG chart from a SQL query or a data file, posted into the conversation.

The drawing itself lives in `agent_core.charts` and is imported on the first chart, so the
tool set loads without matplotlib.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent_core.charts.shaping import ChartDataError, Table
from agent_core.charts.spec import HEIGHT_PX, MAX_CHART_ROWS, WIDTH_PX, ChartType, MakeChartInput, XKind
from agent_core.messages import OutboundFile
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError
from agent_core.tools.data_files import decode_text, file_suffix, read_data_file
from agent_core.tools.files import conversation_workspace, workspace_errors
from agent_core.tools.sql import query_conversation_data

MAX_DATA_FILE_BYTES = 20 * 1024 * 1024


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


class MakeChartTool(Tool[MakeChartInput]):
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

    async def run(self, args: MakeChartInput, ctx: ToolContext) -> Any:
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
            table = Table(columns=result.columns, rows=result.rows)
        else:
            table = await _load_data_file(ctx, args.data_file or "")
        from agent_core.charts.drawing import render  # matplotlib loads with the first chart

        try:
            png, drawn = await asyncio.to_thread(render, args, table)
        except ChartDataError as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from None
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


async def _load_data_file(ctx: ToolContext, path: str) -> Table:
    vpath, raw = await read_data_file(ctx, path, MAX_DATA_FILE_BYTES)
    return await asyncio.to_thread(_parse_data_file, vpath, raw)


def _parse_data_file(vpath: str, raw: bytes) -> Table:
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


def _parse_csv(text: str, delimiter: str | None) -> Table:
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(io.StringIO(text), delimiter=delimiter)
    header = next(reader, [])
    width = len(header)
    rows = [(row + [None] * width)[:width] for row in reader if any(cell.strip() for cell in row)]
    return Table(columns=[h.strip() for h in header], rows=rows)


def _parse_json(text: str, vpath: str, *, lines: bool) -> Table:
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
        return Table(columns=[str(c) for c in data["columns"]], rows=list(data["rows"]))
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
    return Table(columns=columns, rows=[[item.get(c) for c in columns] for item in data])
