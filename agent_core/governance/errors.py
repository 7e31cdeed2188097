"""Typed errors of the access policy: a broken policy file, and a query the policy refuses."""

from __future__ import annotations

from agent_core.data.errors import DataError
from agent_core.yaml_lines import YamlFileError


class PolicyFileError(YamlFileError):
    """The ``BA_ACCESS_POLICY`` file cannot be used; each problem names its line."""


class AccessDenied(DataError):
    """The access policy refuses this query for its audience; the message says what and why."""
