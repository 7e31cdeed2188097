"""The governed metrics (dbt Semantic Layer YAML) as one conversation may use them, and a metric
query run on its source.

A metric query compiles to one SQL statement in the source's dialect, which then takes the same
read-only path as `sql_query` (guard, read-only session, row and byte caps, channel/user
allowlists and access policy of the source, audit trail); the demo metrics run on the demo
data. Used by `list_metrics`/`query_metric`, the push-down analytics (`agent_core.semantic.cubes`),
monitors and `ba-agent metrics`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agent_core.config import AgentConfig
from agent_core.data.duckdb_engine import QueryResult
from agent_core.data.source_config import SQL_DIALECTS
from agent_core.governance.access import DEFAULT_BYTE_CAP, DEFAULT_QUERY_TIMEOUT_S, SourceAccess
from agent_core.provenance import TimeRange, record_query
from agent_core.run_context import RunContext
from agent_core.semantic.errors import MetricQueryError, UnsafeFilterError
from agent_core.semantic.model import DEMO_SOURCE, METRIC_TIME, Metric, SemanticLayer, SourceSemantics
from agent_core.semantic.query import MetricQuery, metric_dimensions
from agent_core.toolkit.protocol import ErrorType, NotedResult, ToolError
from agent_core.toolkit.queries import (
    capped_result,
    data_errors,
    open_source,
    query_conversation_data,
    require_open_source,
    usable_sources,
)

DEFAULT_ROW_CAP = 1000


class MetricSummary(BaseModel):
    name: str
    description: str | None
    type: Literal["simple", "ratio", "derived", "cumulative"]
    dimensions: list[str]
    source: str


class MetricDefinition(BaseModel):
    """What a metric means, so an answer can say which definition it used."""

    name: str
    label: str | None
    type: str
    description: str | None
    definition: str


class MetricQueryResult(NotedResult):
    source: str
    rows: list[dict[str, Any]]
    sql: str
    definitions: list[MetricDefinition]
    row_count: int
    truncated: bool


class MetricCatalog:
    """The semantic layer as one conversation may use it (the sources its channel/user may read)."""

    def __init__(self, config: AgentConfig, access: SourceAccess | None = None) -> None:
        from agent_core.semantic.loader import load_semantic_layer

        # Metric SQL over a configured source takes the governed path like any other query:
        # the access policy, the row budget, the audit trail (``access`` None: neither limited
        # nor recorded, for a catalog built without the service database).
        self.access = access or SourceAccess(config.datasources, config.access_policy)
        self.datasources = self.access.datasources
        self.layer: SemanticLayer = load_semantic_layer(config.semantic_dir, self.datasources)
        self.policy = self.access.policy
        self.columns = self.access.columns

    def usable(self, ctx: RunContext) -> list[SourceSemantics]:
        open_here = {name for name in usable_sources(self.datasources, ctx) if self._policy_opens(name, ctx)}
        return [
            s for name, s in sorted(self.layer.sources.items())
            if name in open_here or (name == DEMO_SOURCE and name not in self.datasources)
        ]  # fmt: skip

    def _policy_opens(self, name: str, ctx: RunContext) -> bool:
        try:
            require_open_source(self.policy, name, ctx)
        except ToolError:
            return False
        return True

    def source_for(self, metrics: list[str], requested: str | None, ctx: RunContext) -> SourceSemantics:
        usable = self.usable(ctx)
        if requested is not None:
            chosen = [s for s in usable if s.source == requested]
            if not chosen:
                names = ", ".join(s.source for s in usable) or "none"
                raise ToolError(
                    f"No metrics are defined for source {requested!r} here. Sources with metrics: {names}.",
                    ErrorType.INVALID_PARAMETERS,
                )
            return chosen[0]
        holders = [s for s in usable if all(s.metric(m) is not None for m in metrics)]
        if len(holders) == 1:
            return holders[0]
        if len(holders) > 1:
            names = ", ".join(s.source for s in holders)
            raise ToolError(f"Several sources define {', '.join(metrics)} ({names}); set `source`.", ErrorType.INVALID_PARAMETERS)
        unknown = [m for m in metrics if not any(s.metric(m) for s in usable)]
        valid = ", ".join(sorted({m.name for s in usable for m in s.metrics})) or "none"
        if unknown:
            raise ToolError(f"Unknown metric(s) {', '.join(unknown)}. Metrics defined: {valid}.", ErrorType.INVALID_PARAMETERS)
        raise ToolError(
            f"The metrics {', '.join(metrics)} are not defined on one source; query each source separately.",
            ErrorType.INVALID_PARAMETERS,
        )


async def run_metric_query(
    catalog: MetricCatalog,
    semantics: SourceSemantics,
    query: MetricQuery,
    ctx: RunContext,
    *,
    row_cap: int | None = None,
    byte_cap: int = DEFAULT_BYTE_CAP,
    metrics: list[str] | None = None,
    tool: str = "query_metric",
) -> MetricQueryResult:
    """Compile ``query`` and run it on its source through the guarded read-only path.

    Push-down analytics pass their own caps (a cube, not an answer), the metrics they compute
    when ``query`` names per-period helpers (see `agent_core.semantic.pushdown`) and their own
    name (``tool``), which the audit trail records."""
    from agent_core.semantic.compiler import compile_metric_query

    try:
        compiled = compile_metric_query(semantics, query)
    except UnsafeFilterError as exc:
        raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc
    except MetricQueryError as exc:
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
    row_cap = row_cap or query.limit or DEFAULT_ROW_CAP
    metrics = metrics or query.metrics
    access_note: str | None = None
    period = _period(query)
    if semantics.source == DEMO_SOURCE and DEMO_SOURCE not in catalog.datasources:
        result = await query_conversation_data(
            ctx, compiled.sql, max_rows=row_cap, byte_cap=byte_cap, metrics=metrics, period=period
        )
    else:
        cfg = await open_source(catalog.access, semantics.source, ctx, tool=tool, sql=compiled.sql)
        with data_errors():
            governed = await catalog.access.query(
                ctx,
                cfg,
                compiled.sql,
                tool=ctx.tool_name or tool,
                row_cap=row_cap,
                timeout_s=DEFAULT_QUERY_TIMEOUT_S,
                byte_cap=byte_cap,
            )
        access_note = governed.access_note
        result = capped_result(governed, byte_cap)
        record_query(
            ctx.turn.data_used,
            result,
            source=cfg.name,
            dialect=SQL_DIALECTS[cfg.kind],
            metrics=metrics,
            period=period,
            call_id=ctx.tool_call_id,
            policy_shaped=governed.policy_shaped,
        )
    return MetricQueryResult(
        source=semantics.source,
        rows=_rows(result),
        sql=compiled.sql,
        definitions=[_definition(semantics.metric(name)) for name in query.metrics if semantics.metric(name)],
        row_count=result.row_count,
        truncated=result.truncated,
        access_note=access_note,
    )


def metric_summaries(semantics: SourceSemantics) -> list[MetricSummary]:
    return [
        MetricSummary(
            name=m.name,
            description=m.description,
            type=m.type,
            dimensions=metric_dimensions(semantics, m),
            source=semantics.source,
        )
        for m in semantics.metrics
    ]


def _period(query: MetricQuery) -> TimeRange | None:
    """The dates and grain a metric query asked for (for the answer's provenance line)."""
    grains = [g.rpartition("__")[2] for g in query.group_by if g.startswith(f"{METRIC_TIME}__")]
    grain = query.grain or (grains[0] if grains else None)
    if query.start is None and query.end is None and grain is None:
        return None
    return TimeRange(
        start=query.start.isoformat() if query.start else None,
        end=query.end.isoformat() if query.end else None,
        grain=grain,
    )


def _rows(result: QueryResult) -> list[dict[str, Any]]:
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


def _definition(metric: Metric | None) -> MetricDefinition:
    assert metric is not None
    if metric.type == "simple":
        text = f"measure {metric.measure}"
    elif metric.type == "ratio":
        assert metric.numerator and metric.denominator
        text = f"{metric.numerator.name} / {metric.denominator.name}"
    elif metric.type == "derived":
        text = metric.expr or ""
    else:
        assert metric.base is not None
        span = (
            f"trailing {metric.window[0]} {metric.window[1]}(s)" if metric.window
            else f"{metric.grain_to_date} to date" if metric.grain_to_date else "all time"
        )  # fmt: skip
        text = f"{metric.base.name} accumulated over {span}"
    if metric.filter:
        text += f" where {metric.filter}"
    return MetricDefinition(
        name=metric.name, label=metric.label, type=metric.type, description=metric.description, definition=text
    )
