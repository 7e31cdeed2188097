"""The governed metrics a data tool (anomalies, attribution, charts) may analyse.

Built on the tool's first metric call, since the semantic layer and pandas are heavy to load
and most calls read a file or SQL instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from agent_core.config import AgentConfig

if TYPE_CHECKING:
    from agent_core.governance.access import SourceAccess
    from agent_core.semantic.cubes import MetricCubes


class MetricInputs:
    """``config`` None: the bundled demo metrics; ``access`` None: source reads are neither
    limited nor recorded (a tool built without the service database)."""

    name: ClassVar[str]  # the tool's: its source reads are audited under it

    def __init__(self, config: AgentConfig | None = None, access: SourceAccess | None = None) -> None:
        self._config = config
        self._access = access
        self._metric_cubes: MetricCubes | None = None

    def _cubes(self) -> MetricCubes:
        if self._metric_cubes is None:
            from agent_core.semantic.cubes import MetricCubes

            self._metric_cubes = MetricCubes(self._config, self._access, tool=self.name)
        return self._metric_cubes
