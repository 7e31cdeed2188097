"""Deterministic analytics core: anomaly detection on metrics over time and multi-dimensional
root-cause attribution of a metric's deviation. Pure functions on pandas DataFrames with
pydantic results, so agent tools can wrap them and return JSON."""

from agent_core.analytics.anomaly import (
    AnomalyEvent,
    AnomalyReport,
    Sensitivity,
    SeriesDiagnostics,
    detect_anomalies,
)
from agent_core.analytics.attribution import (
    AttributionConfig,
    AttributionResult,
    Candidate,
    Period,
    RootCause,
    attribute_change,
    attribute_change_between_periods,
)

__all__ = [
    "AnomalyEvent",
    "AnomalyReport",
    "AttributionConfig",
    "AttributionResult",
    "Candidate",
    "Period",
    "RootCause",
    "SeriesDiagnostics",
    "Sensitivity",
    "attribute_change",
    "attribute_change_between_periods",
    "detect_anomalies",
]
