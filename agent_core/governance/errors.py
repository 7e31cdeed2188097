"""Typed errors of the access policy: a broken policy file, and a query the policy refuses."""

from __future__ import annotations

from pathlib import Path

from agent_core.data.errors import DataError


class PolicyFileError(ValueError):
    """The ``BA_ACCESS_POLICY`` file cannot be used; each problem names its line.

    A ValueError so that a settings validator reports it like any other invalid setting.
    """

    def __init__(self, path: Path, problems: list[tuple[int | None, str]]) -> None:
        self.path = path
        self.problems = problems
        where = "; ".join(
            f"line {line}: {reason}" if line is not None else reason for line, reason in problems
        )
        super().__init__(f"{path}: {where}")


class AccessDenied(DataError):
    """The access policy refuses this query for its audience; the message says what and why."""
