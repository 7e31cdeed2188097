"""A metric query (the public input of `query_metric` and of push-down analytics) and how its
names resolve against one source's semantic models.

Group-by and filter names follow MetricFlow: a plain dimension name (``region``) when it is
unambiguous, ``entity__dimension`` to name the semantic model through its entity,
``metric_time`` (each measure's aggregation time dimension) and a ``__grain`` suffix on time
dimensions (``metric_time__week``, ``order__ordered_at__month``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import cast

from pydantic import BaseModel, Field, field_validator, model_validator

from agent_core.semantic.errors import MetricQueryError
from agent_core.semantic.model import (
    GRAINS,
    METRIC_TIME,
    Dimension,
    Entity,
    Grain,
    Metric,
    MetricInput,
    SemanticModel,
    SourceSemantics,
)

MAX_METRICS = 10
MAX_GROUP_BY = 8
_NAME = r"^-?[a-z][a-z0-9_]{0,127}$"


class MetricQuery(BaseModel):
    metrics: list[str] = Field(..., min_length=1, max_length=MAX_METRICS, description="Metric names (list_metrics shows them).")
    group_by: list[str] = Field(
        default_factory=list,
        max_length=MAX_GROUP_BY,
        description=(
            "Dimensions to break the metrics down by: a dimension name (region), "
            "entity__dimension (customer__region) or metric_time__<grain> (metric_time__week)."
        ),
    )
    where: str | None = Field(
        None,
        max_length=2000,
        description=(
            "A condition over dimension names and literal values, "
            "e.g. region = 'East China' AND channel IN ('app', 'web')."
        ),
    )
    grain: Grain | None = Field(
        None, description="Time grain of metric_time; adds metric_time__<grain> to group_by when it is not there."
    )
    start: date | None = Field(None, description="First day included (YYYY-MM-DD), on metric_time.")
    end: date | None = Field(None, description="Last day included (YYYY-MM-DD), on metric_time.")
    order_by: list[str] = Field(
        default_factory=list,
        max_length=MAX_GROUP_BY + MAX_METRICS,
        description="Group-by or metric names to sort by; prefix '-' for descending (-gmv). Default: the group-by columns.",
    )
    limit: int | None = Field(None, ge=1, le=5000, description="Most rows to return.")

    @field_validator("metrics", "group_by", "order_by")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        import re

        for name in names:
            if not re.match(_NAME, name):
                raise ValueError(f"{name!r} is not a metric or dimension name")
        if len(set(names)) != len(names):
            raise ValueError("names must not repeat")
        return names

    @model_validator(mode="after")
    def _range(self) -> MetricQuery:
        if self.start and self.end and self.start > self.end:
            raise ValueError("start is after end")
        return self

    @property
    def output_group_by(self) -> list[str]:
        """The group-by keys of the result, metric_time__<grain> added when `grain` asks for it."""
        keys = list(self.group_by)
        if self.grain and not any(split_name(k)[0] == [METRIC_TIME] for k in keys):
            keys.append(f"{METRIC_TIME}__{self.grain}")
        return keys


class SourcedMetricQuery(MetricQuery):
    """A metric query with the source that defines its metrics (needed only when several do)."""

    source: str | None = Field(
        None, max_length=64, description="The source defining the metrics; needed only when several define them."
    )


@dataclass(frozen=True)
class ResolvedDimension:
    """A group-by or filter name, resolved for the semantic model a measure lives in."""

    key: str
    model: SemanticModel  # where the column lives
    dimension: Dimension | None  # None: metric_time (the measure's aggregation time dimension)
    join: tuple[Entity, Entity] | None  # (entity in the measure's model, same entity in `model`)
    grain: Grain | None  # time dimensions only


def split_name(name: str) -> tuple[list[str], Grain | None]:
    """``a__b__week`` → (["a", "b"], "week"); the grain only when the last part is one."""
    parts = name.split("__")
    if len(parts) > 1 and parts[-1] in GRAINS:
        return parts[:-1], cast(Grain, parts[-1])
    return parts, None


def resolve_dimension(
    semantics: SourceSemantics, home: SemanticModel, name: str, default_grain: Grain | None
) -> ResolvedDimension:
    """Resolve ``name`` for a measure of ``home``; raises MetricQueryError naming valid names."""
    parts, grain = split_name(name)
    if parts == [METRIC_TIME]:
        return ResolvedDimension(name, home, None, None, grain or default_grain or "day")
    candidates = [c for c in _reachable(semantics, home) if _matches(c, parts)]
    if len(candidates) > 1:
        local = [c for c in candidates if c[0] is home and c[1] is None]
        if len(parts) == 1 and len(local) == 1:
            candidates = local
        else:
            options = ", ".join(sorted(_qualified(c) for c in candidates))
            raise MetricQueryError(f"{name!r} is ambiguous here; name one of: {options}.")
    if not candidates:
        valid = ", ".join(available_dimensions(semantics, home))
        raise MetricQueryError(f"Unknown dimension {name!r}. Dimensions available here: {valid}.")
    model, join, dimension = candidates[0]
    if grain and not dimension.is_time:
        raise MetricQueryError(f"{name!r}: {dimension.name} is not a time dimension, so it takes no __{grain}.")
    if dimension.is_time:
        grain = grain or default_grain or dimension.time_granularity
    return ResolvedDimension(name, model, dimension, join, grain)


_Candidate = tuple[SemanticModel, tuple[Entity, Entity] | None, Dimension]


def _reachable(semantics: SourceSemantics, home: SemanticModel) -> list[_Candidate]:
    """Dimensions a measure of ``home`` can be grouped by: its own, and those of models joined
    through an entity that identifies their rows (so the join cannot multiply the measure)."""
    found: list[_Candidate] = [(home, None, d) for d in home.dimensions]
    for entity in home.entities:
        for other in semantics.models:
            target = other.entity(entity.name)
            if other is home or target is None or not target.identifies_rows:
                continue
            found += [(other, (entity, target), d) for d in other.dimensions]
    return found


def _matches(candidate: _Candidate, parts: list[str]) -> bool:
    model, join, dimension = candidate
    if len(parts) == 1:
        return dimension.name == parts[0]
    if len(parts) == 2:
        entity = join[1].name if join else model.primary_entity
        return dimension.name == parts[1] and parts[0] == entity
    return False


def _qualified(candidate: _Candidate) -> str:
    model, join, dimension = candidate
    entity = join[1].name if join else model.primary_entity
    return f"{entity}__{dimension.name}" if entity else dimension.name


def available_dimensions(semantics: SourceSemantics, home: SemanticModel) -> list[str]:
    """Group-by names a measure of ``home`` accepts (plain names where unambiguous)."""
    candidates = _reachable(semantics, home)
    names = [METRIC_TIME]
    for candidate in candidates:
        same = [c for c in candidates if c[2].name == candidate[2].name]
        local = [c for c in same if c[1] is None]
        plain = len(same) == 1 or (candidate[1] is None and len(local) == 1)
        name = candidate[2].name if plain else _qualified(candidate)
        if name not in names:
            names.append(name)
    return names


def metric_or_error(semantics: SourceSemantics, name: str) -> Metric:
    metric = semantics.metric(name)
    if metric is None:
        valid = ", ".join(m.name for m in semantics.metrics)
        raise MetricQueryError(f"Unknown metric {name!r} in source {semantics.source!r}. Metrics defined: {valid}.")
    return metric


def home_models(semantics: SourceSemantics, metric: Metric) -> list[SemanticModel]:
    """The semantic models whose measures a metric aggregates (recursively)."""
    if metric.type == "simple":
        model, _ = semantics.measure(metric.measure or metric.name)
        return [model]
    inputs: list[MetricInput | None]
    if metric.type == "ratio":
        inputs = [metric.numerator, metric.denominator]
    elif metric.type == "derived":
        inputs = list(metric.inputs)
    else:
        inputs = [metric.base]
    found: list[SemanticModel] = []
    for item in inputs:
        if item is None:
            continue
        for model in home_models(semantics, metric_or_error(semantics, item.name)):
            if model not in found:
                found.append(model)
    return found


def metric_dimensions(semantics: SourceSemantics, metric: Metric) -> list[str]:
    """The group-by names every measure of ``metric`` accepts."""
    lists = [available_dimensions(semantics, m) for m in home_models(semantics, metric)]
    return [name for name in lists[0] if all(name in other for other in lists[1:])] if lists else []
