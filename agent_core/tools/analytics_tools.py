"""`detect_anomalies` and `attribute_change`: the analytics core (`agent_core.analytics`) as tools.

Both read their rows either from one guarded read-only DuckDB query (the same path as
``sql_query``: uploads by plain name, demo data as ``demo.sales``), from a CSV/JSON file in the
conversation's ``/data`` or ``/uploads`` area, or from a governed metric, aggregated in the
metric's own database (push-down, `agent_core.semantic.cubes`: only the aggregated cube
comes back). They return the core's pydantic result unformatted; the tool pipeline decides how
much of it the model sees. Parsing and the statistics run in a worker thread, so a large series
never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import io
import json
from datetime import date
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, model_validator

from agent_core.analytics.inputs import Period, Sensitivity
from agent_core.run_context import RunContext
from agent_core.semantic.metric_inputs import MetricInputs
from agent_core.semantic.model import Grain
from agent_core.toolkit.files import decode_text, file_suffix, read_data_file
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.toolkit.queries import query_conversation_data
from agent_core.tools.sql import MAX_SQL_CHARS

if TYPE_CHECKING:  # pandas and the analytics core load when a tool first runs
    import pandas as pd

    from agent_core.analytics.anomaly import AnomalyReport
    from agent_core.analytics.attribution import AttributionResult
    from agent_core.data.duckdb_engine import QueryResult
    from agent_core.semantic.cubes import PeriodChange
    from agent_core.toolkit.approval_gate import PlannedQuery
    from agent_core.tools.deps import ToolDeps

MAX_INPUT_ROWS = 200_000
MAX_INPUT_BYTES = 100 * 1024 * 1024  # of query values, and of a data file
_SQL_HELP = (
    "A read-only DuckDB query returning the rows to analyse (uploads by plain name, demo data "
    "as demo.sales). Give exactly one of `sql`, `data_file` or `metric`."
)
_METRIC_HELP = (
    "A governed metric (see list_metrics) to analyse instead of rows: it is aggregated in its "
    "own database and only the aggregate comes back. Prefer it over `sql` when the metric exists."
)
_FILE_HELP = (
    "A CSV/TSV or JSON file under /data or /uploads with a header row (CSV) or a list of "
    "objects (JSON), e.g. the /data file a large sql_query result was saved to."
)


def build(deps: ToolDeps) -> list[Tool]:
    return [DetectAnomaliesTool(deps.config, deps.access), AttributeChangeTool(deps.config, deps.access)]


# --- loading rows ----------------------------------------------------------------------------


class _RowSource(BaseModel):
    """Where the rows come from: exactly one of a query, a workspace file or a metric."""

    sql: str | None = Field(None, min_length=1, max_length=MAX_SQL_CHARS, description=_SQL_HELP)
    data_file: str | None = Field(None, min_length=1, max_length=1024, description=_FILE_HELP)
    metric: str | None = Field(None, min_length=1, max_length=128, description=_METRIC_HELP)
    source: str | None = Field(
        None, max_length=64, description="With `metric`: the source defining it, needed only when several do."
    )
    where: str | None = Field(
        None,
        max_length=2000,
        description="With `metric`: a condition over its dimensions and literal values, e.g. channel IN ('app', 'web').",
    )

    @model_validator(mode="after")
    def _one_source(self) -> _RowSource:
        if sum(v is not None for v in (self.sql, self.data_file, self.metric)) != 1:
            raise ValueError("give exactly one of `sql` or `data_file`, or a `metric` instead")
        if self.metric is None and (self.source is not None or self.where is not None):
            raise ValueError("`source` and `where` go with `metric`")
        return self


async def _load_frame(ctx: RunContext, source: _RowSource) -> pd.DataFrame:
    """The rows of ``source`` as a DataFrame (values as DuckDB or the file gave them)."""
    if source.sql is not None:
        result = await query_conversation_data(
            ctx, source.sql, max_rows=MAX_INPUT_ROWS, byte_cap=MAX_INPUT_BYTES
        )
        if result.truncated:
            raise ToolError(
                f"The query returned more than {MAX_INPUT_ROWS:,} rows. Aggregate it in SQL "
                "first (one row per period, segment or leaf).",
                ErrorType.INVALID_PARAMETERS,
            )
        return await asyncio.to_thread(_frame_from_result, result)
    vpath, raw = await read_data_file(ctx, source.data_file or "", MAX_INPUT_BYTES)
    return await asyncio.to_thread(_frame_from_file, vpath, raw)


def _frame_from_result(result: QueryResult) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(result.rows, columns=result.columns)


def _frame_from_file(vpath: str, raw: bytes) -> pd.DataFrame:
    """Parse a CSV/TSV/JSON(L) data file; every failure is a ToolError naming the file."""
    import pandas as pd

    suffix = file_suffix(vpath)
    text = decode_text(vpath, raw)
    try:
        if suffix in ("csv", "tsv", "txt"):
            frame = pd.read_csv(io.StringIO(text), sep="\t" if suffix == "tsv" else ",")
        elif suffix in ("jsonl", "ndjson"):
            frame = pd.DataFrame([json.loads(line) for line in text.splitlines() if line.strip()])
        elif suffix == "json":
            frame = _frame_from_json(json.loads(text), vpath)
        else:
            raise ToolError(
                f"{vpath}: only .csv, .tsv, .json and .jsonl files can be analysed (uploaded "
                "spreadsheets are tables: use `sql` instead).",
                ErrorType.INVALID_PARAMETERS,
            )
    except (ValueError, pd.errors.ParserError) as exc:  # JSONDecodeError is a ValueError
        raise ToolError(f"{vpath} could not be parsed: {exc}", ErrorType.INVALID_PARAMETERS) from exc
    if len(frame) > MAX_INPUT_ROWS:
        raise ToolError(
            f"{vpath} has more than {MAX_INPUT_ROWS:,} rows; aggregate it first.",
            ErrorType.INVALID_PARAMETERS,
        )
    return frame


def _frame_from_json(data: Any, vpath: str) -> pd.DataFrame:
    import pandas as pd

    # The shape sql_query returns ({"columns": [...], "rows": [[...]]}) is accepted as is.
    if isinstance(data, dict) and isinstance(data.get("columns"), list) and "rows" in data:
        return pd.DataFrame(data["rows"], columns=data["columns"])
    if isinstance(data, list) and all(isinstance(item, dict) for item in data):
        return pd.DataFrame(data)
    raise ToolError(
        f'{vpath}: expected a list of objects (one per row), or {{"columns": [...], "rows": '
        "[[...], ...]}.",
        ErrorType.INVALID_PARAMETERS,
    )


def _require_columns(frame: pd.DataFrame, columns: list[str | None]) -> None:
    """Fail with the available columns listed, so the model can fix the call in one step."""
    missing = [c for c in columns if c is not None and c not in frame.columns]
    if missing:
        available = ", ".join(map(str, frame.columns)) or "none"
        raise ToolError(
            f"column(s) not found: {', '.join(missing)}. The rows have: {available}.",
            ErrorType.INVALID_PARAMETERS,
        )


# --- detect_anomalies ------------------------------------------------------------------------


class DetectAnomaliesInput(_RowSource):
    time_column: str | None = Field(
        None, min_length=1, description="With `sql`/`data_file` (required): date or timestamp column."
    )
    value_column: str | None = Field(
        None,
        min_length=1,
        description="With `sql`/`data_file` (required): the metric. Rows sharing a timestamp "
        "(within a segment) are summed, so pass ratio metrics already computed per period.",
    )
    segment_column: str | None = Field(
        None,
        min_length=1,
        description="Optional column (with `metric`: dimension) splitting the rows into separate "
        "series (e.g. region); each series is checked on its own. Start with the total before splitting.",
    )
    grain: Grain = Field("day", description="With `metric`: the period each point covers.")
    start: date | None = Field(None, description="With `metric`: first day of history to read (YYYY-MM-DD).")
    end: date | None = Field(None, description="With `metric`: last day to read (YYYY-MM-DD).")
    sensitivity: Sensitivity = Field(
        "medium", description="low: only very clear anomalies; high: more, weaker candidates."
    )
    holidays: list[date] = Field(
        default_factory=list,
        max_length=1000,
        description="Dates whose values are expected to be unusual (public holidays, known "
        "promotions): they are neither reported nor learnt from.",
    )
    report_from: date | None = Field(
        None,
        description="Only report episodes starting on or after this date; earlier rows still "
        "serve as history (e.g. the last day for a daily monitor, with 8+ weeks of history).",
    )

    @model_validator(mode="after")
    def _columns_or_metric(self) -> DetectAnomaliesInput:
        if self.metric is not None:
            if self.time_column is not None or self.value_column is not None:
                raise ValueError("with `metric`, leave out time_column and value_column (the metric gives both)")
            if self.start and self.end and self.start > self.end:
                raise ValueError("start is after end")
        elif self.time_column is None or self.value_column is None:
            raise ValueError("give time_column and value_column with `sql` or `data_file`")
        elif (self.start, self.end, self.grain) != (None, None, "day"):
            raise ValueError("grain, start and end go with `metric` (filter the rows in `sql` instead)")
        return self


class DetectAnomaliesTool(MetricInputs, Tool[DetectAnomaliesInput]):
    name = "detect_anomalies"
    description = (
        "Find anomalous spikes, drops and level shifts in a metric over time, seasonality-aware "
        "(daily/weekly/yearly cycles), optionally per segment. Causal: each point is judged "
        "only from the points before it, so the first points (one cycle) are a learning "
        "period and a result never changes when later data arrives. Input: a governed `metric` "
        "(computed per `grain` period in its database, optionally per dimension), or rows, one "
        "per period (and segment), from a DuckDB query (`sql`) or a CSV/JSON file (`data_file`). "
        "Give the whole history window, not only the period of interest (use `report_from` to "
        "limit what is reported). Returns each episode once at its onset (end, peak, value vs "
        "expected, normal band, direction, kind, severity, score in [0, 1], cause) plus how "
        "each series was analysed."
    )
    Input = DetectAnomaliesInput
    timeout_s = 120.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: DetectAnomaliesInput, ctx: RunContext) -> AnomalyReport:
        from agent_core.analytics.anomaly import detect_anomalies

        if args.metric is not None:
            return await self._run_on_metric(args, args.metric, ctx)
        assert args.time_column is not None and args.value_column is not None
        frame = await _load_frame(ctx, args)
        _require_columns(frame, [args.time_column, args.value_column, args.segment_column])
        try:
            return await asyncio.to_thread(
                detect_anomalies,
                frame,
                args.time_column,
                args.value_column,
                segment_column=args.segment_column,
                sensitivity=args.sensitivity,
                holidays=args.holidays,
                report_from=args.report_from,
            )
        except (ValueError, TypeError) as exc:  # e.g. a time column that holds no dates
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc

    async def plan_query(self, args: DetectAnomaliesInput, ctx: RunContext) -> PlannedQuery | None:
        """What a metric call would run on a configured source (the approval gate asks this)."""
        if args.metric is None:
            return None
        from agent_core.semantic.cubes import series_query

        try:
            query = series_query(args.metric, **_series(args))
        except ToolError:  # running it reports why
            return None
        return await self._cubes().plan(ctx, [args.metric], args.source, query)

    async def _run_on_metric(self, args: DetectAnomaliesInput, metric: str, ctx: RunContext) -> AnomalyReport:
        from agent_core.analytics.anomaly import detect_anomalies
        from agent_core.semantic.cubes import MetricAnomalyReport, series_query, time_column

        query = series_query(metric, **_series(args))
        frame, computed = await self._cubes().series(ctx, metric, args.source, query, max_rows=MAX_INPUT_ROWS)
        if frame.empty:
            raise ToolError(f"{metric} has no values in the requested range.", ErrorType.INVALID_PARAMETERS)
        try:
            report = await asyncio.to_thread(
                detect_anomalies,
                frame,
                time_column(args.grain),
                metric,
                segment_column=args.segment_column,
                sensitivity=args.sensitivity,
                holidays=args.holidays,
                report_from=args.report_from,
            )
        except (ValueError, TypeError) as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
        return MetricAnomalyReport(**dict(report), computed_in_source=computed)


def _series(args: DetectAnomaliesInput) -> dict[str, Any]:
    return {"segment": args.segment_column, "grain": args.grain, "start": args.start, "end": args.end, "where": args.where}


# --- attribute_change ------------------------------------------------------------------------


class AttributeChangeInput(_RowSource):
    dimensions: list[str] = Field(
        ...,
        min_length=1,
        max_length=6,
        description="Dimension columns (with `metric`: its dimensions) to localize the change "
        'in, e.g. ["region", "channel", "category", "platform"]; combinations of up to 3 are searched.',
    )
    # Form 1: a leaf table with the additive metric in both periods.
    baseline_column: str | None = Field(
        None, description="Leaf table, additive metric: the baseline (previous period/forecast)."
    )
    actual_column: str | None = Field(None, description="Leaf table, additive metric: the actual.")
    # Form 2: a leaf table with numerator and denominator in both periods (ratio metrics).
    numerator_columns: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Leaf table, ratio metric: [baseline, actual] numerator columns (e.g. "
        "orders), with `denominator_columns`.",
    )
    denominator_columns: list[str] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description="Leaf table, ratio metric: [baseline, actual] denominator columns.",
    )
    # Form 3: raw rows with a time column and two periods.
    time_column: str | None = Field(
        None,
        description="Raw rows: the date column; with `baseline_period`, `comparison_period` and "
        "`metric_column` (or `numerator_column` + `denominator_column`).",
    )
    baseline_period: Period | None = Field(None, description="Raw rows or `metric`: inclusive date range.")
    comparison_period: Period | None = Field(None, description="Raw rows or `metric`: inclusive date range.")
    metric_column: str | None = Field(
        None,
        description="Raw rows, additive metric. A baseline of a different length is rescaled "
        "to the comparison period's number of days.",
    )
    numerator_column: str | None = Field(None, description="Raw rows, ratio metric: numerator.")
    denominator_column: str | None = Field(None, description="Raw rows, ratio metric: denominator.")
    metric_name: str | None = Field(
        None, max_length=80, description="How to call the metric in the explanation, e.g. GMV."
    )

    @model_validator(mode="after")
    def _one_form(self) -> AttributeChangeInput:
        if self.metric is not None:
            return self._metric_form()
        additive = self.baseline_column is not None or self.actual_column is not None
        ratio = self.numerator_columns is not None or self.denominator_columns is not None
        periods = any(
            value is not None
            for value in (
                self.time_column,
                self.baseline_period,
                self.comparison_period,
                self.metric_column,
                self.numerator_column,
                self.denominator_column,
            )
        )
        if additive + ratio + periods != 1:
            raise ValueError(
                "use exactly one form: baseline_column + actual_column; or numerator_columns + "
                "denominator_columns; or time_column + baseline_period + comparison_period with "
                "metric_column (or numerator_column + denominator_column)"
            )
        if additive and (self.baseline_column is None or self.actual_column is None):
            raise ValueError("give both baseline_column and actual_column")
        if ratio and (self.numerator_columns is None or self.denominator_columns is None):
            raise ValueError("give both numerator_columns and denominator_columns")
        if periods:
            if None in (self.time_column, self.baseline_period, self.comparison_period):
                raise ValueError("give time_column, baseline_period and comparison_period together")
            has_ratio = self.numerator_column is not None or self.denominator_column is not None
            if (self.metric_column is not None) == has_ratio:
                raise ValueError(
                    "with periods, give metric_column, or numerator_column and denominator_column"
                )
            if has_ratio and (self.numerator_column is None or self.denominator_column is None):
                raise ValueError("give both numerator_column and denominator_column")
        return self

    def _metric_form(self) -> AttributeChangeInput:
        if self.baseline_period is None or self.comparison_period is None:
            raise ValueError("with `metric`, give baseline_period and comparison_period")
        columns = {
            "baseline_column": self.baseline_column,
            "actual_column": self.actual_column,
            "numerator_columns": self.numerator_columns,
            "denominator_columns": self.denominator_columns,
            "time_column": self.time_column,
            "metric_column": self.metric_column,
            "numerator_column": self.numerator_column,
            "denominator_column": self.denominator_column,
        }
        given = [name for name, value in columns.items() if value is not None]
        if given:
            raise ValueError(f"with `metric`, leave out {', '.join(given)} (the metric defines its values)")
        return self

    def columns(self) -> list[str | None]:
        """Every column the chosen form reads."""
        pairs = [*(self.numerator_columns or ()), *(self.denominator_columns or ())]
        return [
            *self.dimensions,
            self.baseline_column,
            self.actual_column,
            *pairs,
            self.time_column,
            self.metric_column,
            self.numerator_column,
            self.denominator_column,
        ]


class AttributeChangeTool(MetricInputs, Tool[AttributeChangeInput]):
    name = "attribute_change"
    description = (
        "Explain why a metric changed: find the fewest dimension=value combinations (e.g. "
        "region=East China & channel=app), at whatever depth (1-3 dimensions), whose leaves "
        "moved together and carry the deviation beyond forecast noise, with their contribution "
        "and share; a segment whose sub-segments all moved alike is named instead of them. At "
        "most 10 root causes are listed, the largest first "
        "(`unlisted_root_causes` counts the rest). Simplest: a governed `metric` with "
        "`dimensions`, baseline_period and comparison_period (aggregated in its database; ratio "
        "metrics get rate vs mix effects). Otherwise rows come from a DuckDB query (`sql`) or a "
        "CSV/JSON file (`data_file`) in one of three forms: a leaf table with baseline_column + "
        "actual_column (additive metric); a leaf table with numerator_columns + "
        "denominator_columns, each [baseline, actual] (ratio metric: rate vs mix effects); or "
        "raw rows with time_column, baseline_period, comparison_period and metric_column (or "
        "numerator_column + denominator_column)."
    )
    Input = AttributeChangeInput
    timeout_s = 120.0
    # Read-only: harmless to retry, and may run alongside other read-only calls.
    idempotent = True
    concurrency_safe = True

    async def run(self, args: AttributeChangeInput, ctx: RunContext) -> AttributionResult:
        if args.metric is not None:
            return await self._run_on_metric(args, args.metric, ctx)
        frame = await _load_frame(ctx, args)
        _require_columns(frame, args.columns())
        try:
            return await asyncio.to_thread(_attribute, frame, args)
        except (ValueError, TypeError) as exc:  # e.g. a period without rows
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc

    async def plan_query(self, args: AttributeChangeInput, ctx: RunContext) -> PlannedQuery | None:
        """What a metric call would run on a configured source (the approval gate asks this)."""
        if args.metric is None:
            return None
        return await self._cubes().plan_attribution(ctx, args.metric, args.source, _change(args))

    async def _run_on_metric(self, args: AttributeChangeInput, metric: str, ctx: RunContext) -> AttributionResult:
        return await self._cubes().attribute(
            ctx, metric, args.source, _change(args), max_rows=MAX_INPUT_ROWS, metric_name=args.metric_name
        )


def _change(args: AttributeChangeInput) -> PeriodChange:
    """The change a metric call asks to explain (its input validator ensured both periods)."""
    from agent_core.semantic.cubes import PeriodChange

    assert args.baseline_period is not None and args.comparison_period is not None
    return PeriodChange(args.dimensions, args.baseline_period, args.comparison_period, args.where)


def _attribute(frame: pd.DataFrame, args: AttributeChangeInput) -> AttributionResult:
    from agent_core.analytics.attribution import attribute_change, attribute_change_between_periods

    if args.time_column is not None:
        assert args.baseline_period is not None and args.comparison_period is not None
        result = attribute_change_between_periods(
            frame,
            args.time_column,
            args.dimensions,
            args.baseline_period,
            args.comparison_period,
            args.metric_column,
            numerator_column=args.numerator_column,
            denominator_column=args.denominator_column,
        )
        # The core names the metric after its column here; the explanation starts with it.
        default = args.metric_column or f"{args.numerator_column}/{args.denominator_column}"
        if args.metric_name is None or not result.explanation.startswith(default):
            return result
        explanation = args.metric_name + result.explanation[len(default) :]
        return result.model_copy(update={"explanation": explanation})
    return attribute_change(
        frame,
        args.dimensions,
        args.baseline_column,
        args.actual_column,
        numerator=_pair(args.numerator_columns),
        denominator=_pair(args.denominator_columns),
        metric_name=args.metric_name or "The metric",
    )


def _pair(columns: list[str] | None) -> tuple[str, str] | None:
    """[baseline, actual] as the core's (baseline, actual) tuple."""
    return (columns[0], columns[1]) if columns else None

