"""Governed metrics as the input of `detect_anomalies`, `attribute_change`, `make_chart` and monitor
runs.

The aggregation runs in the metric's source (push-down): one compiled metric query per call —
a series at a grain, the leaf cube of two periods side by side (`agent_core.semantic.pushdown`),
or a plain metric query for a chart — through the same guarded, access-controlled path as
`query_metric` (:func:`~agent_core.semantic.catalog.run_metric_query`). Only that aggregated
cube comes back, never the raw rows. Imported on a tool's first metric call (it loads pandas and
the analytics core).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
from pydantic import BaseModel, Field

from agent_core.analytics.anomaly import AnomalyReport
from agent_core.analytics.attribution import AttributionResult, attribute_period_leaves
from agent_core.analytics.inputs import Period
from agent_core.config import AgentConfig
from agent_core.run_context import RunContext
from agent_core.semantic.catalog import MetricCatalog, MetricQueryResult, run_metric_query
from agent_core.semantic.errors import MetricQueryError, UnsafeFilterError
from agent_core.semantic.model import METRIC_TIME, Grain, SourceSemantics
from agent_core.semantic.pushdown import PeriodComparison, metric_query, period_comparison
from agent_core.semantic.query import MetricQuery, SourcedMetricQuery
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.toolkit.queries import plan_source_query

if TYPE_CHECKING:
    from agent_core.governance.access import SourceAccess
    from agent_core.toolkit.approval_gate import PlannedQuery

_T = TypeVar("_T")
# The definitions a query compiles against (a source's, plus helpers) and the query.
_Compiled = tuple[SourceSemantics, MetricQuery]


@dataclass(frozen=True)
class PeriodChange:
    """What an attribution explains: a metric's change from `baseline` to `comparison`, split
    by `dimensions`, over the rows `where` keeps."""

    dimensions: list[str]
    baseline: Period
    comparison: Period
    where: str | None = None


class ComputedInSource(BaseModel):
    """How a metric input was computed: one aggregate query in the metric's source."""

    source: str
    metric: str
    sql: str = Field(description="The aggregate query that ran (before the access policy's rewrite).")
    cube_rows: int = Field(description="Aggregated rows that came back (no raw rows are read).")
    access_note: str | None = None  # what the access policy withheld, when it did


class MetricAnomalyReport(AnomalyReport):
    computed_in_source: ComputedInSource


class MetricAttributionResult(AttributionResult):
    computed_in_source: ComputedInSource


def series_query(
    metric: str, *, segment: str | None, grain: Grain, start: date | None, end: date | None, where: str | None
) -> MetricQuery:
    """``metric`` per ``grain`` period (and ``segment`` value): one GROUP BY over metric_time."""
    group_by = [segment] if segment else []
    return _or_tool_error(
        lambda: metric_query(metrics=[metric], group_by=group_by, grain=grain, start=start, end=end, where=where)
    )


def time_column(grain: Grain) -> str:
    """The column of a :func:`series_query` result holding each period's first day."""
    return f"{METRIC_TIME}__{grain}"


class MetricCubes:
    """The metric catalog of one tool (or monitor run), and the cubes computed from it; its
    source reads are audited under ``tool``."""

    def __init__(self, config: AgentConfig | None, access: SourceAccess | None = None, *, tool: str) -> None:
        # A tool built without the configuration (on its own, in a test) has the demo metrics.
        self._catalog = MetricCatalog(config or AgentConfig.model_construct(), access)
        self._tool = tool

    async def series(
        self, ctx: RunContext, metric: str, source: str | None, query: MetricQuery, *, max_rows: int
    ) -> tuple[pd.DataFrame, ComputedInSource]:
        """The rows of a :func:`series_query` and how they were computed."""
        result = await self._run(ctx, self._semantics([metric], source, ctx), query, max_rows, [metric])
        return pd.DataFrame(result.rows), _computed(result, metric)

    async def attribute(
        self, ctx: RunContext, metric: str, source: str | None, change: PeriodChange, *, max_rows: int,
        metric_name: str | None,
    ) -> MetricAttributionResult:
        """Attribute ``metric``'s change between the periods from its leaf cube (both periods side
        by side, one row per combination of the dimensions' values)."""
        semantics = self._semantics([metric], source, ctx)
        plan = _or_tool_error(lambda: _leaf_cube(semantics, metric, change))
        result = await self._run(ctx, plan.semantics, plan.query, max_rows, [metric])
        defined = semantics.metric(metric)
        name = metric_name or (defined.label if defined is not None and defined.label else metric)
        parts = plan.parts
        columns: dict[str, Any] = (
            {"numerator_column": parts[0], "denominator_column": parts[1]} if plan.is_ratio else {"metric_column": parts[0]}
        )
        leaves = pd.DataFrame(result.rows, columns=[*change.dimensions, *plan.query.metrics])
        try:
            attributed = attribute_period_leaves(
                leaves, change.dimensions, change.baseline, change.comparison, metric_name=name, **columns
            )
        except (ValueError, TypeError) as exc:  # e.g. a period without rows
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
        return MetricAttributionResult(**dict(attributed), computed_in_source=_computed(result, metric))

    async def rows(self, ctx: RunContext, request: SourcedMetricQuery, *, max_rows: int) -> MetricQueryResult:
        """``request`` computed in its source (a chart's rows)."""
        semantics = self._semantics(request.metrics, request.source, ctx)
        return await self._run(ctx, semantics, _plain(request), max_rows, request.metrics)

    async def plan(self, ctx: RunContext, metrics: list[str], source: str | None, query: MetricQuery) -> PlannedQuery | None:
        """What :meth:`rows` or :meth:`series` would run on a configured source, for the
        approval gate; None for the demo metrics, or a call that would fail anyway."""
        return await self._plan(ctx, metrics, source, lambda semantics: (semantics, query))

    async def plan_attribution(
        self, ctx: RunContext, metric: str, source: str | None, change: PeriodChange
    ) -> PlannedQuery | None:
        """What :meth:`attribute` would run on a configured source, for the approval gate."""

        def build(semantics: SourceSemantics) -> _Compiled:
            plan = _leaf_cube(semantics, metric, change)
            return plan.semantics, plan.query

        return await self._plan(ctx, [metric], source, build)

    async def _plan(
        self, ctx: RunContext, metrics: list[str], source: str | None, build: Callable[[SourceSemantics], _Compiled]
    ) -> PlannedQuery | None:
        from agent_core.semantic.compiler import compile_metric_query

        try:
            semantics, query = build(self._semantics(metrics, source, ctx))
            compiled = compile_metric_query(semantics, query)
        except (ToolError, MetricQueryError):
            return None
        catalog = self._catalog
        cfg = catalog.datasources.get(semantics.source)
        if cfg is None:
            return None
        return await plan_source_query(cfg, compiled.sql, ctx, catalog.policy, catalog.columns, metrics)

    def _semantics(self, metrics: list[str], source: str | None, ctx: RunContext) -> SourceSemantics:
        return self._catalog.source_for(metrics, source, ctx)

    async def _run(
        self, ctx: RunContext, semantics: SourceSemantics, query: MetricQuery, max_rows: int, metrics: list[str]
    ) -> MetricQueryResult:
        # A cube row is a few keys and numbers: 1 kB a row bounds the bytes generously.
        result = await run_metric_query(
            self._catalog, semantics, query, ctx,
            row_cap=max_rows, byte_cap=max_rows * 1000, metrics=metrics, tool=self._tool,
        )  # fmt: skip
        if result.truncated:
            raise ToolError(
                f"The metric's aggregated result has more than {max_rows:,} rows. Use fewer or coarser "
                "dimensions, a coarser grain or a shorter date range.",
                ErrorType.INVALID_PARAMETERS,
            )
        return result


def _leaf_cube(semantics: SourceSemantics, metric: str, change: PeriodChange) -> PeriodComparison:
    periods = (change.baseline.start, change.baseline.end), (change.comparison.start, change.comparison.end)
    return period_comparison(semantics, metric, change.dimensions, *periods, change.where)


def _plain(request: SourcedMetricQuery) -> MetricQuery:
    return MetricQuery.model_validate(request.model_dump(exclude={"source"}))


def _or_tool_error(build: Callable[[], _T]) -> _T:
    try:
        return build()
    except UnsafeFilterError as exc:
        raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc
    except MetricQueryError as exc:
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc


def _computed(result: MetricQueryResult, metric: str) -> ComputedInSource:
    return ComputedInSource(
        source=result.source, metric=metric, sql=result.sql, cube_rows=result.row_count, access_note=result.access_note
    )
