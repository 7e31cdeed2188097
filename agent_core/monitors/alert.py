"""What an alert says at an onset: what moved and how much against the expectation, the root
cause, a chart of the series, and the provenance line of the data behind it.

The root cause is the metric's change from the comparable period a week earlier
(`check.expected_period`) to the judged one, localized over the monitor's dimensions by
`attribute_change`'s algorithm, computed in the metric's database like the series.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from agent_core.i18n import Language, t
from agent_core.messages import OutboundFile
from agent_core.monitors.check import Evaluation, Finding, expected_period
from agent_core.monitors.model import AlertView, Monitor, MonitorSpec
from agent_core.provenance import Provenance, ProvenanceWords
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ToolError

if TYPE_CHECKING:
    from agent_core.semantic.cubes import MetricCubes

MAX_FACTS = 5
MAX_CAUSES = 3
# A segment carrying less of the change than this is no explanation worth an alert's line.
MIN_CAUSE_SHARE = 0.1
CHART_SPAN = {"day": timedelta(weeks=8), "week": timedelta(weeks=52)}
MAX_LEAF_ROWS = 100_000


async def build_alert(
    alert_id: str, monitor: Monitor, evaluation: Evaluation, cubes: MetricCubes, ctx: RunContext, chart_dir: Path
) -> AlertView:
    """The alert of an onset, in the monitor's language; its chart is written into ``chart_dir``."""
    language = monitor.language
    findings = sorted(evaluation.findings, key=lambda f: (-f.event.score, f.segment is None))
    main = findings[0]
    where = _where(monitor, main, language)
    day = evaluation.period.start.isoformat()
    if monitor.grain == "day":
        headline = (
            t(language, "{metric} dropped ({where}) on {day}", metric=monitor.metric, where=where, day=day)
            if main.event.direction == "drop"
            else t(language, "{metric} spiked ({where}) on {day}", metric=monitor.metric, where=where, day=day)
        )
    else:
        headline = (
            t(language, "{metric} dropped ({where}) in the week of {day}", metric=monitor.metric, where=where, day=day)
            if main.event.direction == "drop"
            else t(language, "{metric} spiked ({where}) in the week of {day}", metric=monitor.metric, where=where, day=day)
        )
    root_cause = await _root_cause(monitor, evaluation, cubes, ctx, language) if monitor.dimensions else None
    chart = await _chart(alert_id, monitor, evaluation, main, chart_dir, language)
    provenance = Provenance.of(ctx.turn.data_used)
    return AlertView(
        id=alert_id,
        monitor=monitor.name,
        platform=monitor.platform,
        workspace=monitor.workspace,
        channel=monitor.channel,
        headline=headline,
        facts=[_fact(monitor, finding, language) for finding in findings[:MAX_FACTS]],
        root_cause=root_cause,
        provenance=provenance.summary_line(ProvenanceWords.of(language)) if provenance is not None else None,
        chart=chart,
        language=language,
    )


def _where(monitor: MonitorSpec, finding: Finding, language: Language) -> str:
    if finding.segment is None:
        return t(language, "total, {where}", where=monitor.where) if monitor.where else t(language, "total")
    return f"{monitor.dimensions[0]}={finding.segment}"


def _fact(monitor: MonitorSpec, finding: Finding, language: Language) -> str:
    event = finding.event
    change = f" ({event.value / event.expected - 1:+.0%})" if event.expected else ""
    return t(
        language,
        "{where}: {value} against {expected} expected{change}; normal range {lower} to {upper}",
        where=_where(monitor, finding, language),
        value=f"{event.value:,.0f}",
        expected=f"{event.expected:,.0f}",
        change=change,
        lower=f"{event.lower:,.0f}",
        upper=f"{event.upper:,.0f}",
    )


async def _root_cause(
    monitor: MonitorSpec, evaluation: Evaluation, cubes: MetricCubes, ctx: RunContext, language: Language
) -> str | None:
    from agent_core.semantic.cubes import PeriodChange  # loaded with `cubes` already

    baseline = expected_period(evaluation.period)
    try:
        result = await cubes.attribute(
            ctx,
            monitor.metric,
            monitor.source,
            PeriodChange(monitor.dimensions, baseline, evaluation.period, monitor.where),
            max_rows=MAX_LEAF_ROWS,
            metric_name=monitor.metric,
        )
    except ToolError as exc:  # e.g. no rows in the baseline period
        return t(language, "not found ({reason})", reason=exc)
    since = baseline.start.isoformat()
    found = [cause for cause in result.root_causes if abs(cause.share) >= MIN_CAUSE_SHARE]
    if not found:
        return t(language, "no segment stands out: the change against {day} is spread widely", day=since)
    causes = []
    for cause in found[:MAX_CAUSES]:
        element = " & ".join(f"{key}={value}" for key, value in cause.element.items())
        moved = f", {cause.relative_change:+.0%}" if cause.relative_change is not None else ""
        share = f"{cause.share:.0%}"
        causes.append(t(language, "{segment} ({share} of the change{moved})", segment=element, share=share, moved=moved))
    return t(language, "{causes}, against {day}", causes="; ".join(causes), day=since)


async def _chart(
    alert_id: str, monitor: MonitorSpec, evaluation: Evaluation, main: Finding, chart_dir: Path, language: Language
) -> OutboundFile | None:
    """A line chart of the anomalous series over its recent history, the judged period marked."""
    from agent_core.charts.shaping import ChartDataError, Table
    from agent_core.charts.spec import ChartAnnotation, MakeChartInput
    from agent_core.semantic.query import SourcedMetricQuery

    column = evaluation.time_column
    frame = evaluation.series_of(main.segment)
    since = evaluation.period.start - CHART_SPAN[monitor.grain]
    dates = [value.date() if hasattr(value, "date") else value for value in frame[column]]
    rows = sorted([d.isoformat(), float(v)] for d, v in zip(dates, frame[monitor.metric], strict=True) if d >= since)
    quoted = main.segment.replace("'", "''") if main.segment is not None else None
    segment_filter = f"{monitor.dimensions[0]} = '{quoted}'" if quoted is not None else None
    where = " AND ".join(w for w in (monitor.where, segment_filter) if w) or None
    label = t(language, "drop") if main.event.direction == "drop" else t(language, "spike")
    request = MakeChartInput(
        chart_type="line",
        title=f"{monitor.metric} ({_where(monitor, main, language)})",
        subtitle=(
            t(language, "by day; monitor {name}", name=monitor.name)
            if monitor.grain == "day"
            else t(language, "by week; monitor {name}", name=monitor.name)
        ),
        metric_query=SourcedMetricQuery(metrics=[monitor.metric], grain=monitor.grain, where=where, source=monitor.source),
        x=column,
        y=[monitor.metric],
        annotations=[ChartAnnotation(x=evaluation.period.start.isoformat(), label=label)],
    )
    from agent_core.charts.drawing import render

    try:
        png, _ = await asyncio.to_thread(render, request, Table(columns=[column, monitor.metric], rows=rows))
    except ChartDataError:
        return None
    path = chart_dir / f"{monitor.name}-{alert_id}.png"
    await asyncio.to_thread(_write, path, png)
    return OutboundFile(path=str(path), title=request.title, mime_type="image/png")


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
