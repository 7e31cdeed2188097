"""The aggregated cubes push-down analytics ask a source for, as metric queries.

`detect_anomalies` over a metric needs one value per period (and segment): a plain
:class:`MetricQuery` grouped by ``metric_time`` at the grain (:func:`metric_query` validates
it). `attribute_change` needs, per leaf (one combination of the dimensions' values), the
metric's additive parts in the baseline and in the comparison period: :func:`period_comparison`
asks for both periods side by side in one query, each part a measure aggregated under a period
filter (``SUM(CASE WHEN day BETWEEN … THEN amount END)`` grouped by the dimensions, rows limited
to the span of the two periods). So the source scans the fact rows once, on every dialect, and
returns one row per leaf.

Why not one GROUP BY per period, or GROUPING SETS: two queries scan the fact table twice when
no index serves the date filter; GROUPING SETS would also return every coarser combination,
which the localization computes itself from the leaves (sums of leaves), so they only add bytes
— and MySQL/MariaDB has no GROUPING SETS. ``bench/pushdown.py`` (10M rows, 4 dimensions, 480
leaves, two weeks, PostgreSQL 15, 2 busy cores): side by side 0.31 s and 32 kB, one query per
period 0.59 s and 53 kB, GROUPING SETS 1.25 s and 123 kB; pulling the two weeks' raw rows
into DuckDB instead moves 17.7 MB.

Only metrics that add up across leaves can be split this way: simple metrics over a sum, count
or sum_boolean measure, and ratios of two such metrics (numerator and denominator are attributed
separately, as rate and mix effects).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from pydantic import ValidationError

from agent_core.semantic.errors import MetricQueryError
from agent_core.semantic.model import Metric, SourceSemantics
from agent_core.semantic.query import MetricQuery, metric_or_error

ADDITIVE_AGGREGATIONS = frozenset({"sum", "count", "sum_boolean"})
BASELINE_SUFFIX = "__base"
COMPARISON_SUFFIX = "__comp"
NUMERATOR = "numerator"
DENOMINATOR = "denominator"

DateRange = tuple[date, date]  # inclusive


@dataclass(frozen=True)
class PeriodComparison:
    """One query returning, per leaf, each additive part of a metric in both periods.

    Run ``query`` on ``semantics`` (the source's definitions plus the per-period parts); each
    part comes back as ``<part>__base`` and ``<part>__comp``.
    """

    semantics: SourceSemantics
    query: MetricQuery
    parts: tuple[str, ...]  # the metric's name (additive), or numerator and denominator (ratio)

    @property
    def is_ratio(self) -> bool:
        return self.parts == (NUMERATOR, DENOMINATOR)


def metric_query(**fields: Any) -> MetricQuery:
    """A validated :class:`MetricQuery`; invalid names raise MetricQueryError, not ValidationError."""
    try:
        return MetricQuery(**fields)
    except ValidationError as exc:
        reasons = "; ".join(str(error["msg"]).removeprefix("Value error, ") for error in exc.errors())
        raise MetricQueryError(f"Invalid metric query: {reasons}.") from None


def period_comparison(
    semantics: SourceSemantics,
    metric_name: str,
    dimensions: list[str],
    baseline: DateRange,
    comparison: DateRange,
    where: str | None = None,
) -> PeriodComparison:
    """The leaf cube attributing ``metric_name``'s change between two periods; raises
    MetricQueryError naming the metrics that can be attributed when this one cannot."""
    metric = metric_or_error(semantics, metric_name)
    reason = _why_not_additive(semantics, metric)
    if reason is not None:
        valid = ", ".join(attributable_metrics(semantics)) or "none"
        raise MetricQueryError(
            f"Cannot attribute a change of {metric_name!r}: {reason}. Metrics that can be attributed: {valid}."
        )
    # Each part: the simple metric aggregated, and the filters of the ratio and its input.
    bases: dict[str, tuple[Metric, tuple[str | None, ...]]] = {metric.name: (metric, ())}
    if metric.type == "ratio":
        assert metric.numerator is not None and metric.denominator is not None
        inputs = {NUMERATOR: metric.numerator, DENOMINATOR: metric.denominator}
        bases = {part: (metric_or_error(semantics, item.name), (metric.filter, item.filter)) for part, item in inputs.items()}
    helpers: list[Metric] = []
    for part, (base, filters) in bases.items():
        for suffix, (start, end) in ((BASELINE_SUFFIX, baseline), (COMPARISON_SUFFIX, comparison)):
            period = f"metric_time BETWEEN DATE '{start.isoformat()}' AND DATE '{end.isoformat()}'"
            conditions = [f for f in (*filters, base.filter) if f] + [period]
            helpers.append(
                Metric(
                    name=f"{part}{suffix}",
                    type="simple",
                    measure=base.measure,
                    semantic_model=base.semantic_model,
                    filter=" AND ".join(f"({c})" for c in conditions),
                )
            )
    taken = {m.name for m in semantics.metrics} & {h.name for h in helpers}
    if taken:
        raise MetricQueryError(f"Cannot attribute {metric_name!r}: metric names {', '.join(sorted(taken))} are taken.")
    query = metric_query(
        metrics=[h.name for h in helpers],
        group_by=dimensions,
        where=where,
        start=min(baseline[0], comparison[0]),
        end=max(baseline[1], comparison[1]),
    )
    return PeriodComparison(replace(semantics, metrics=(*semantics.metrics, *helpers)), query, tuple(bases))


def attributable_metrics(semantics: SourceSemantics) -> list[str]:
    """Names of the metrics :func:`period_comparison` accepts."""
    return [m.name for m in semantics.metrics if _why_not_additive(semantics, m) is None]


def _why_not_additive(semantics: SourceSemantics, metric: Metric) -> str | None:
    """None if ``metric`` adds up across leaves (or is a ratio of two that do), else why not."""
    if metric.type == "ratio":
        assert metric.numerator is not None and metric.denominator is not None
        for item in (metric.numerator, metric.denominator):
            if item.offset_window is not None:
                return f"its input {item.name} is offset in time"
            inner = metric_or_error(semantics, item.name)
            reason = (
                _why_not_additive(semantics, inner)
                if inner.type == "simple"
                else f"its input {inner.name} is a {inner.type} metric"
            )
            if reason is not None:
                return reason
        return None
    if metric.type != "simple":
        return f"{metric.name} is a {metric.type} metric"
    _, measure = semantics.measure(metric.measure or metric.name)
    if measure.agg not in ADDITIVE_AGGREGATIONS:
        return f"{metric.name} aggregates with {measure.agg}, which does not add up across segments"
    return None
