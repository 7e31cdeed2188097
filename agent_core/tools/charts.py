"""`make_chart`: a PNG chart from a SQL query, a data file or governed metrics (computed in their
own database, see `agent_core.semantic.cubes`), posted into the conversation.

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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from agent_core.charts.shaping import ChartDataError, Table
from agent_core.charts.spec import HEIGHT_PX, MAX_CHART_ROWS, WIDTH_PX, ChartType, MakeChartInput, XKind
from agent_core.i18n import t
from agent_core.messages import OutboundFile
from agent_core.run_context import RunContext
from agent_core.semantic.metric_inputs import MetricInputs
from agent_core.toolkit.files import conversation_workspace, decode_text, file_suffix, read_data_file, workspace_errors
from agent_core.toolkit.protocol import ErrorType, NotedResult, Tool, ToolError
from agent_core.toolkit.queries import query_conversation_data

if TYPE_CHECKING:
    from agent_core.toolkit.approval_gate import PlannedQuery
    from agent_core.tools.deps import ToolDeps

MAX_DATA_FILE_BYTES = 20 * 1024 * 1024


def build(deps: ToolDeps) -> list[Tool]:
    return [MakeChartTool(deps.config, deps.access)]


# --- result ----------------------------------------------------------------------------------


class ChartSeries(BaseModel):
    name: str
    axis: Literal["left", "right"] = "left"
    points: int  # values actually drawn (missing ones are skipped)


class ChartResult(NotedResult):
    """What was drawn; the PNG itself and the CSV of its data are posted to the conversation."""

    path: str  # virtual path in the workspace, e.g. /charts/daily-gmv-3f2a9c1b0d.png
    data_path: str  # the chart's data as CSV beside it, e.g. /charts/daily-gmv-3f2a9c1b0d.csv
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
    sql: str | None = None  # with `metric_query`: the aggregate query that ran in its source
    access_note: str | None = None  # what the access policy withheld, when it did


# --- tool ------------------------------------------------------------------------------------


class MakeChartTool(MetricInputs, Tool[MakeChartInput]):
    name = "make_chart"
    description = (
        "Draw a chart (line, bar, stacked_bar, scatter or combo bar+line with two axes) from "
        "governed metrics (`metric_query`), a DuckDB query or a CSV/JSON file in /data or "
        "/uploads, save it as a PNG in /charts and "
        "post it into this conversation, with its data as a CSV beside it. Chinese labels are supported. Shape the data first: "
        "one row per point, x column plus numeric y column(s). Mention the chart in your answer "
        "instead of repeating all its numbers."
    )
    Input = MakeChartInput
    timeout_s = 90.0
    # Charts are drawn one at a time (see _render_lock) into distinct files.
    concurrency_safe = True

    async def plan_query(self, args: MakeChartInput, ctx: RunContext) -> PlannedQuery | None:
        """What a metric chart would run on a configured source (the approval gate asks this)."""
        if args.metric_query is None:
            return None
        from agent_core.semantic.query import MetricQuery

        request = args.metric_query
        query = MetricQuery.model_validate(request.model_dump(exclude={"source"}))
        return await self._cubes().plan(ctx, request.metrics, request.source, query)

    async def run(self, args: MakeChartInput, ctx: RunContext) -> Any:
        sql: str | None = None
        access_note: str | None = None
        if args.metric_query is not None:
            request = args.metric_query
            computed = await self._cubes().rows(ctx, request, max_rows=MAX_CHART_ROWS)
            columns = [*request.output_group_by, *request.metrics]
            table = Table(columns=columns, rows=[[row[c] for c in columns] for row in computed.rows])
            sql, access_note = computed.sql, computed.access_note
        elif args.sql is not None:
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
        stem = f"/charts/{slugify(args.title, 'chart')}-{digest}"
        vpath, data_vpath = f"{stem}.png", f"{stem}.csv"
        workspace = conversation_workspace(ctx)
        with workspace_errors():
            # Same name means same bytes, so replacing an earlier identical chart is harmless.
            await workspace.write(vpath, png, overwrite=True)
            await workspace.write(data_vpath, _csv_bytes(table), overwrite=True)
            real = await workspace.real_path(vpath)
            data_real = await workspace.real_path(data_vpath)
        ctx.turn.produced_files += [
            OutboundFile(path=str(real), title=args.title, mime_type="image/png"),
            # The numbers behind the picture, for whoever wants to check or reuse them.
            OutboundFile(path=str(data_real), title=t(ctx.language, "{title} (data)", title=args.title), mime_type="text/csv"),
        ]
        return ChartResult(
            path=vpath,
            data_path=data_vpath,
            chart_type=args.chart_type,
            title=args.title,
            x=drawn.x_name,
            x_kind=drawn.x_kind,
            categories=len(drawn.xs),
            series=[ChartSeries(name=s.name, axis=s.axis, points=s.points) for s in drawn.series],
            points=sum(s.points for s in drawn.series),
            notes=drawn.notes,
            sql=sql,
            access_note=access_note,
        )


def slugify(text: str, default: str) -> str:
    """A short file-name stem from free text; keeps letters of any script (Chinese too)."""
    slug = re.sub(r"[^\w]+", "-", text.lower()).strip("-_")[:60].strip("-_")
    return slug or default


def _csv_bytes(table: Table) -> bytes:
    """The charted table as UTF-8 CSV (with a BOM, so spreadsheet apps read Chinese right)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.columns)
    writer.writerows(["" if value is None else value for value in row] for row in table.rows)
    return out.getvalue().encode("utf-8-sig")


# --- loading data ----------------------------------------------------------------------------


async def _load_data_file(ctx: RunContext, path: str) -> Table:
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
