"""Typed errors of the semantic layer; messages are written for the operator or the model."""

from __future__ import annotations

from agent_core.data.errors import DataError


class SemanticModelError(DataError):
    """A semantic-layer YAML file is invalid; the message names the file, line and reason."""


class MetricQueryError(DataError):
    """A metric query names something the semantic layer does not define (the message lists
    what is defined) or asks for something the definitions cannot answer."""


class UnsafeFilterError(MetricQueryError):
    """A ``where`` filter is not a plain boolean condition over dimensions and literals."""
