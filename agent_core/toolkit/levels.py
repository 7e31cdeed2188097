"""Output levels: how much of a tool's result the model sees, and who decides.

The level is progressive disclosure for tool observations, orthogonal to what the tool does: the
same raw data can be shown as key facts (BRIEF), an actionable preview (STANDARD) or in full
(FULL). The decision chain, first match wins:

1. the call's own ``output_level`` argument (the model asked),
2. the tool's configured default,
3. the global default (STANDARD unless configured otherwise);

then, whatever was chosen, BRIEF is forced while the context window is over the pressure
threshold (80 % by default): a nearly full context cannot afford previews.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

OUTPUT_LEVEL_FIELD = "output_level"
"""The argument every tool accepts on top of its own input model."""

DEFAULT_CONTEXT_PRESSURE = 0.8


class OutputLevel(StrEnum):
    BRIEF = "brief"  # key facts only: "Found 1,204 rows; columns …"
    STANDARD = "standard"  # actionable preview: first rows, counts, truncation notice
    FULL = "full"  # complete data, or a file reference plus a summary when large


class LevelSource(StrEnum):
    """Which rung of the decision chain chose the level (engineering data, for logs)."""

    CALL = "call"
    TOOL = "tool"
    GLOBAL = "global"
    CONTEXT = "context"  # forced BRIEF by context pressure


@dataclass(frozen=True)
class LevelDecision:
    level: OutputLevel
    source: LevelSource


def decide_output_level(
    requested: OutputLevel | None,
    tool_default: OutputLevel | None,
    global_default: OutputLevel = OutputLevel.STANDARD,
    context_fill: float = 0.0,
    pressure_threshold: float = DEFAULT_CONTEXT_PRESSURE,
) -> LevelDecision:
    """Resolve the output level of one call (see the module docstring for the chain)."""
    if requested is not None:
        decision = LevelDecision(requested, LevelSource.CALL)
    elif tool_default is not None:
        decision = LevelDecision(tool_default, LevelSource.TOOL)
    else:
        decision = LevelDecision(global_default, LevelSource.GLOBAL)
    if context_fill > pressure_threshold and decision.level is not OutputLevel.BRIEF:
        return LevelDecision(OutputLevel.BRIEF, LevelSource.CONTEXT)
    return decision


def parse_output_level(value: Any) -> OutputLevel | None:
    """The level the model asked for (case-insensitive); None if it asked for none.

    Raises ValueError with a message fit for the model when the value is not a level.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return OutputLevel(value.strip().lower())
        except ValueError:
            pass
    choices = ", ".join(f'"{level.value}"' for level in OutputLevel)
    raise ValueError(f"must be one of {choices} (got {value!r:.40})")


def output_level_schema(tool_default: OutputLevel | None, global_default: OutputLevel) -> dict[str, Any]:
    """The JSON-schema property added to every tool's input schema."""
    default = tool_default or global_default
    return {
        "type": "string",
        "enum": [level.value for level in OutputLevel],
        "description": (
            "How much of the result to show you: 'brief' (key facts only), 'standard' (a "
            "preview: first rows and counts) or 'full' (everything; large results are saved to "
            f"a file and summarized). Default: '{default.value}'."
        ),
    }
