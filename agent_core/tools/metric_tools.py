"""`list_metrics` and `query_metric`: the governed metric definitions (dbt Semantic Layer YAML,
see :mod:`agent_core.semantic`) and answers computed from them (`agent_core.semantic.catalog`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agent_core.run_context import RunContext
from agent_core.semantic.catalog import MetricCatalog, metric_summaries, run_metric_query
from agent_core.semantic.errors import MetricQueryError
from agent_core.semantic.query import MetricQuery
from agent_core.toolkit.approval_gate import PlannedQuery
from agent_core.toolkit.protocol import Tool, ToolError
from agent_core.toolkit.queries import plan_source_query

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps


def build(deps: ToolDeps) -> list[Tool]:
    catalog = MetricCatalog(deps.config, deps.access)  # the semantic layer, loaded once for both
    return [ListMetricsTool(catalog), QueryMetricTool(catalog)]


class ListMetricsInput(BaseModel):
    source: str | None = Field(None, max_length=64, description="Only this source's metrics.")


class QueryMetricInput(MetricQuery):
    source: str | None = Field(
        None, max_length=64, description="The source defining the metrics; needed only when several define them."
    )


class ListMetricsTool(Tool[ListMetricsInput]):
    name = "list_metrics"
    description = (
        "The governed metric definitions (name, description, type, the dimensions they can be "
        "broken down by, and the source they live on). Use these before writing SQL: a metric "
        "here is the agreed definition of that number."
    )
    Input = ListMetricsInput
    idempotent = True
    concurrency_safe = True

    def __init__(self, catalog: MetricCatalog) -> None:
        self._catalog = catalog

    async def run(self, args: ListMetricsInput, ctx: RunContext) -> Any:
        sources = [s for s in self._catalog.usable(ctx) if args.source in (None, s.source)]
        return [summary for s in sources for summary in metric_summaries(s)]


class QueryMetricTool(Tool[QueryMetricInput]):
    name = "query_metric"
    description = (
        "Compute governed metrics (see list_metrics), optionally grouped by dimensions and a time "
        "grain, filtered by `where` over dimensions and by a start/end date. Returns `rows` keyed "
        "by the group-by and metric names, the compiled `sql`, the `source` and each metric's "
        "definition. Prefer this to sql_query whenever a metric exists for the question."
    )
    Input = QueryMetricInput
    timeout_s = 60.0
    idempotent = True
    concurrency_safe = True

    def __init__(self, catalog: MetricCatalog) -> None:
        self._catalog = catalog

    async def plan_query(self, args: QueryMetricInput, ctx: RunContext) -> PlannedQuery | None:
        """What the call would run on a configured source (the approval gate asks this); None
        for the demo metrics, or when running it would fail anyway."""
        from agent_core.semantic.compiler import compile_metric_query

        try:
            semantics = self._catalog.source_for(args.metrics, args.source, ctx)
            compiled = compile_metric_query(semantics, MetricQuery.model_validate(args.model_dump(exclude={"source"})))
        except (ToolError, MetricQueryError):
            return None
        cfg = self._catalog.datasources.get(semantics.source)
        if cfg is None:
            return None
        return await plan_source_query(cfg, compiled.sql, ctx, self._catalog.policy, self._catalog.columns, args.metrics)

    async def run(self, args: QueryMetricInput, ctx: RunContext) -> Any:
        semantics = self._catalog.source_for(args.metrics, args.source, ctx)
        query = MetricQuery.model_validate(args.model_dump(exclude={"source"}))
        return await run_metric_query(self._catalog, semantics, query, ctx)
