"""Metric definitions as search documents: their names and descriptions, read through the
semantic layer's loader (``BA_SEMANTIC_DIR``, or the bundled demo model without it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from agent_core.data.source_config import DataSourceConfig


class MetricDocument(BaseModel):
    name: str
    description: str | None
    source: str


def metric_documents(semantic_dir: Path | None, datasources: Mapping[str, DataSourceConfig]) -> list[MetricDocument]:
    """Every defined metric's name, description and source. Raises SemanticModelError for an
    invalid semantic layer (start-up refuses those first)."""
    from agent_core.semantic.loader import load_semantic_layer  # dbt-semantic-interfaces is heavy

    layer = load_semantic_layer(semantic_dir, datasources)
    return [
        MetricDocument(name=metric.name, description=metric.description or metric.label, source=semantics.source)
        for semantics in layer.sources.values()
        for metric in semantics.metrics
    ]
