"""The semantic layer as the compiler sees it: plain, immutable objects built from the
validated ``dbt-semantic-interfaces`` manifest of each source (see :mod:`.loader`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SourceDialect = Literal["duckdb", "postgres", "mysql"]
Grain = Literal["day", "week", "month", "quarter", "year"]
GRAINS: tuple[Grain, ...] = ("day", "week", "month", "quarter", "year")
METRIC_TIME = "metric_time"
# The source name of the demo data every conversation has (a DuckDB catalog, not a
# `BA_DATASOURCES` entry); the bundled semantic model describes it.
DEMO_SOURCE = "demo"


@dataclass(frozen=True)
class Table:
    name: str
    schema: str | None = None
    database: str | None = None


@dataclass(frozen=True)
class Entity:
    name: str
    type: str  # primary, unique, foreign or natural
    expr: str

    @property
    def identifies_rows(self) -> bool:
        """True when each value names at most one row, so joining on it cannot fan out."""
        return self.type in ("primary", "unique", "natural")


@dataclass(frozen=True)
class Dimension:
    name: str
    expr: str
    description: str | None = None
    time_granularity: Grain | None = None  # None: a categorical dimension

    @property
    def is_time(self) -> bool:
        return self.time_granularity is not None


@dataclass(frozen=True)
class Measure:
    name: str
    agg: str  # sum, count, count_distinct, average, min, max, sum_boolean, median, percentile
    expr: str
    agg_time_dimension: str
    percentile: float | None = None


@dataclass(frozen=True)
class SemanticModel:
    name: str
    table: Table
    entities: tuple[Entity, ...]
    dimensions: tuple[Dimension, ...]
    measures: tuple[Measure, ...]
    description: str | None = None
    primary_entity: str | None = None  # the entity each row is (dbt's `primary_entity` or a primary entity)

    def entity(self, name: str) -> Entity | None:
        return next((e for e in self.entities if e.name == name), None)

    def dimension(self, name: str) -> Dimension | None:
        return next((d for d in self.dimensions if d.name == name), None)


@dataclass(frozen=True)
class MetricInput:
    """A metric used by a ratio, derived or cumulative metric."""

    name: str
    alias: str | None = None
    filter: str | None = None  # a where filter over dimension names (Jinja refs resolved)
    offset_window: tuple[int, Grain] | None = None

    @property
    def reference(self) -> str:
        return self.alias or self.name


@dataclass(frozen=True)
class Metric:
    name: str
    type: Literal["simple", "ratio", "derived", "cumulative"]
    description: str | None = None
    label: str | None = None
    filter: str | None = None
    measure: str | None = None  # simple: the measure aggregated
    semantic_model: str | None = None  # simple: where the measure lives
    fill_nulls_with: int | None = None
    numerator: MetricInput | None = None
    denominator: MetricInput | None = None
    expr: str | None = None  # derived
    inputs: tuple[MetricInput, ...] = ()  # derived
    base: MetricInput | None = None  # cumulative: the metric accumulated
    window: tuple[int, Grain] | None = None  # cumulative: a trailing window
    grain_to_date: Grain | None = None  # cumulative: reset at the start of each period
    period_agg: Literal["first", "last", "average"] = "first"


@dataclass(frozen=True)
class SourceSemantics:
    """Everything defined for one source."""

    source: str
    dialect: SourceDialect
    models: tuple[SemanticModel, ...]
    metrics: tuple[Metric, ...]
    files: tuple[str, ...] = field(default=())

    def metric(self, name: str) -> Metric | None:
        return next((m for m in self.metrics if m.name == name), None)

    def model(self, name: str) -> SemanticModel:
        return next(m for m in self.models if m.name == name)

    def measure(self, name: str) -> tuple[SemanticModel, Measure]:
        for model in self.models:
            for measure in model.measures:
                if measure.name == name:
                    return model, measure
        raise KeyError(name)


@dataclass(frozen=True)
class SemanticLayer:
    """The metrics of every source that has definitions, by source name."""

    sources: dict[str, SourceSemantics]
