"""One run of a monitor: read the metric's series up to the latest complete period and judge
that period causally, from earlier points only.

The metric is read in its own database (push-down, `agent_core.semantic.cubes`), once in
total and, with dimensions, once per value of the first one, with the creator's permissions.
The detector (`agent_core.analytics.anomaly`) is causal, so the verdict on a period never
depends on later data: the period is anomalous when an episode covers it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from agent_core.analytics.inputs import Period
from agent_core.monitors.model import MonitorGrain, MonitorSpec
from agent_core.run_context import RunContext

if TYPE_CHECKING:
    import pandas as pd

    from agent_core.analytics.anomaly import AnomalyEvent
    from agent_core.semantic.cubes import MetricCubes

# History read before the judged period: enough for the detector to learn weekly (and, for
# weekly monitors, yearly) patterns, little enough to stay one small aggregate.
HISTORY = {"day": timedelta(weeks=26), "week": timedelta(weeks=156)}
MAX_SERIES_ROWS = 50_000


def judged_period(fire_time: datetime, timezone: str, grain: MonitorGrain) -> Period:
    """The latest period complete at ``fire_time`` in the monitor's time zone: yesterday, or
    last week (Monday to Sunday)."""
    today = fire_time.astimezone(ZoneInfo(timezone)).date()
    if grain == "day":
        day = today - timedelta(days=1)
        return Period(start=day, end=day)
    monday = today - timedelta(days=today.weekday()) - timedelta(weeks=1)
    return Period(start=monday, end=monday + timedelta(days=6))


def expected_period(period: Period) -> Period:
    """The comparable period a week earlier (the same weekday, or the week before): the
    baseline the root cause is found against."""
    shift = timedelta(weeks=1)
    return Period(start=period.start - shift, end=period.end - shift)


@dataclass(frozen=True)
class Finding:
    """An anomalous episode covering the judged period, in one series."""

    segment: str | None  # a value of the monitor's first dimension; None: the total
    event: AnomalyEvent


@dataclass(frozen=True)
class Evaluation:
    """The verdict of one run on its period, with the series it was reached from."""

    period: Period
    findings: list[Finding]
    total: pd.DataFrame  # time, metric
    segments: pd.DataFrame | None  # time, first dimension, metric
    time_column: str
    segment_column: str | None

    @property
    def anomalous(self) -> bool:
        return bool(self.findings)

    def series_of(self, segment: str | None) -> pd.DataFrame:
        """The (time, metric) rows of one series: the total's, or one segment's."""
        if segment is None or self.segments is None:
            return self.total
        frame = self.segments
        return frame[frame[self.segment_column].astype(str) == segment].drop(columns=[self.segment_column])


async def evaluate(monitor: MonitorSpec, fire_time: datetime, cubes: MetricCubes, ctx: RunContext) -> Evaluation | None:
    """Judge the latest complete period; None while the source has no value for it yet."""
    from agent_core.semantic.cubes import series_query, time_column

    period = judged_period(fire_time, monitor.timezone, monitor.grain)
    first = period.start - HISTORY[monitor.grain]
    column = time_column(monitor.grain)

    async def series(segment: str | None) -> pd.DataFrame:
        query = series_query(
            monitor.metric, segment=segment, grain=monitor.grain, start=first, end=period.end, where=monitor.where
        )
        frame, _ = await cubes.series(ctx, monitor.metric, monitor.source, query, max_rows=MAX_SERIES_ROWS)
        return frame

    total = await series(None)
    segment_column = monitor.dimensions[0] if monitor.dimensions else None
    segments = await series(segment_column) if segment_column else None
    if total.empty or _latest(total, column) != period.start:
        return None
    findings = await asyncio.to_thread(_findings, monitor, period.start, column, total, segments)
    return Evaluation(period, findings, total, segments, column, segment_column)


def _latest(frame: pd.DataFrame, column: str) -> date:
    import pandas as pd

    return pd.Timestamp(frame[column].max()).date()


def _findings(
    monitor: MonitorSpec, start: date, column: str, total: pd.DataFrame, segments: pd.DataFrame | None
) -> list[Finding]:
    from agent_core.analytics.anomaly import detect_anomalies

    found: list[Finding] = []
    judged = [(total, None)] + ([(segments, monitor.dimensions[0])] if segments is not None else [])
    for frame, segment_column in judged:
        report = detect_anomalies(frame, column, monitor.metric, segment_column=segment_column, sensitivity=monitor.sensitivity)
        # An episode that still covers the judged period: its end is that period.
        found += [Finding(event.segment, event) for event in report.anomalies if event.end.date() == start]
    return found
