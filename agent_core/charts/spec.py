"""What a chart asks for: its type, data source, columns, labels and annotations."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from agent_core.semantic.query import SourcedMetricQuery

WIDTH_PX = 1200
HEIGHT_PX = 700
DPI = 150
MAX_CHART_ROWS = 10_000
OTHER = "Other"

ChartType = Literal["line", "bar", "stacked_bar", "scatter", "combo"]
XKind = Literal["time", "number", "category"]


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
        "Give exactly one of `sql`, `data_file` or `metric_query`.",
    )
    data_file: str | None = Field(
        None,
        max_length=1024,
        description="A CSV/TSV or JSON file under /data or /uploads holding the rows, with a "
        "header row (CSV) or a list of objects (JSON).",
    )
    metric_query: SourcedMetricQuery | None = Field(
        None,
        description="Chart governed metrics (see list_metrics), computed in their database: the "
        "input of query_metric. x, y and series name its group-by and metric names, e.g. x "
        "'metric_time__week', y ['gmv'], series 'region'.",
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
        if sum(v is not None for v in (self.sql, self.data_file, self.metric_query)) != 1:
            raise ValueError("give exactly one of `sql`, `data_file` or `metric_query`")
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
