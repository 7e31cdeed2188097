"""The governed metrics a data tool (anomalies, attribution, charts) may analyse.

Built on the tool's first metric call, since the semantic layer and pandas are heavy to load
and most calls read a file or SQL instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent_core.config import AgentConfig

if TYPE_CHECKING:
    from agent_core.governance.audit import AuditTrail
    from agent_core.tools.metric_cubes import MetricCubes


class MetricInputs:
    """``config`` None: the bundled demo metrics; ``audit`` None: source reads are not recorded
    (a tool built without the service database)."""

    def __init__(self, config: AgentConfig | None = None, audit: AuditTrail | None = None) -> None:
        self._config = config
        self._audit = audit
        self._metric_cubes: MetricCubes | None = None

    def _cubes(self) -> MetricCubes:
        if self._metric_cubes is None:
            from agent_core.tools.metric_cubes import MetricCubes

            self._metric_cubes = MetricCubes(self._config, self._audit)
        return self._metric_cubes
