"""The monitor tools: the model sets up proactive metric monitors from a conversation.

`create_monitor`, `list_monitors` and `delete_monitor` work through the
:class:`~agent_core.monitors.store.MonitorStore` they are given (the gateway's scheduler runs
the monitors). A monitor reads its data with its creator's permissions in the channel it
alerts, checked when it is created and at every run.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime

from pydantic import BaseModel, Field

from agent_core.analytics.inputs import Sensitivity
from agent_core.config import AgentConfig
from agent_core.messages import utcnow
from agent_core.monitors.model import (
    MAX_DIMENSIONS,
    NAME_PATTERN,
    Monitor,
    MonitorExists,
    MonitorGrain,
    MonitorOrigin,
)
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import RunContext
from agent_core.scheduled_work import OnChange
from agent_core.schedules.model import next_fire_times, parse_schedule
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.tools.deps import ToolDeps
from agent_core.tools.schedule_tools import (
    DEFAULT_LIMITS,
    ConversationOrigin,
    CreationLimits,
    checked_schedule,
    require_owner,
)

# A Slack channel reference as the model may copy it from a message: <#C0123|sales-ops>.
_CHANNEL_LINK = re.compile(r"^<#([A-Z0-9]+)(\|[^>]*)?>$")


class MonitorInfo(BaseModel):
    """A monitor as the model sees it."""

    name: str
    metric: str
    dimensions: list[str]
    where: str | None
    grain: MonitorGrain
    cron: str
    timezone: str
    channel: str
    creator: str
    origin: MonitorOrigin
    anomalous_now: bool = False
    muted_until: datetime | None = None
    next_runs: list[datetime] = Field(default_factory=list, description="in the monitor's time zone")


class MonitorList(BaseModel):
    monitors: list[MonitorInfo]


class DeleteResult(BaseModel):
    deleted: str


class CreateMonitorInput(BaseModel):
    name: str = Field(..., pattern=NAME_PATTERN, description="Short unique name, e.g. 'gmv-by-region'.")
    metric: str = Field(..., min_length=1, max_length=128, description="A governed metric (list_metrics).")
    dimensions: list[str] = Field(
        default_factory=list,
        max_length=MAX_DIMENSIONS,
        description="The metric's dimensions, e.g. [\"region\", \"channel\", \"category\"]: the metric is "
        "watched in total and per value of the first one; all are searched for the root cause.",
    )
    where: str | None = Field(None, max_length=2000, description="Optional filter, e.g. channel = 'app'.")
    grain: MonitorGrain = Field("day", description="day: judge yesterday at each run; week: last week.")
    cron: str = Field(
        ..., min_length=1, max_length=120, description="When to check, five-field cron: '0 9 * * *' = every day 09:00."
    )
    timezone: str = Field(..., min_length=1, max_length=64, description="IANA time zone of the cron, e.g. Asia/Shanghai.")
    channel: str | None = Field(
        None, max_length=128, description="The channel id to alert (e.g. C0SALESOPS); default: this conversation's."
    )
    sensitivity: Sensitivity = Field("medium", description="low: only very clear anomalies; high: more alerts.")
    source: str | None = Field(None, max_length=64, description="The source defining the metric, when several do.")


class CreateMonitorTool(Tool[CreateMonitorInput]):
    name = "create_monitor"
    description = (
        "Watch a governed metric on a schedule and alert a channel when it starts to behave "
        "unusually (e.g. 'watch GMV by region every morning at 9:00 and tell #sales-ops'): each "
        "run judges the latest complete day (or week) against the metric's own history; at the "
        "start of an anomaly one alert is posted with what moved, the root cause over the "
        "dimensions, a chart and the data's provenance, with Acknowledge and Mute buttons; the "
        "recovery is noted in the alert's thread. Confirm the name, schedule and channel to the user."
    )
    Input = CreateMonitorInput
    timeout_s = 30.0

    def __init__(
        self,
        store: MonitorStore,
        config: AgentConfig,
        *,
        on_change: OnChange | None = None,
        limits: CreationLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._config = config
        self._on_change = on_change
        self._limits = limits
        self._clock = clock

    async def run(self, args: CreateMonitorInput, ctx: RunContext) -> MonitorInfo:
        origin = ConversationOrigin.of(ctx)
        now = self._clock()
        cron, _ = checked_schedule(args.cron, args.timezone, now, self._limits.min_interval, "monitors")
        channel = _channel_id(args.channel) if args.channel else origin.channel
        mine = [m for m in await self._store.in_workspace(origin.platform, origin.workspace) if m.creator == origin.user]
        if len(mine) >= self._limits.max_per_user:
            raise ToolError(
                f"You already have {len(mine)} monitors, the most allowed; delete one first (list_monitors).",
                ErrorType.RESOURCE_ERROR,
            )
        monitor = Monitor(
            name=args.name,
            metric=args.metric,
            source=args.source,
            dimensions=args.dimensions,
            where=args.where,
            grain=args.grain,
            cron=cron,
            timezone=args.timezone,
            sensitivity=args.sensitivity,
            platform=origin.platform,
            workspace=origin.workspace,
            channel=channel,
            creator=origin.user,
            creator_name=origin.user_name,
            created_at=now,
            language=ctx.language,
        )
        self._check_metric(monitor, ctx)
        try:
            await self._store.create(monitor)
        except MonitorExists:
            taken = f"A monitor named {args.name!r} exists already; pick another name."
            raise ToolError(taken, ErrorType.INVALID_PARAMETERS) from None
        if self._on_change is not None:
            await self._on_change()  # this process schedules it at once; others within a minute
        return _info(monitor, now)

    def _check_metric(self, monitor: Monitor, ctx: RunContext) -> None:
        """The metric, dimensions and filter compile, and the creator may read the metric's
        source in the target channel (a ToolError saying what is wrong otherwise)."""
        from dataclasses import replace

        from agent_core.semantic.catalog import MetricCatalog
        from agent_core.semantic.compiler import compile_metric_query
        from agent_core.semantic.errors import MetricQueryError
        from agent_core.semantic.pushdown import metric_query

        in_target = replace(ctx, channel=monitor.channel)
        semantics = MetricCatalog(self._config).source_for([monitor.metric], monitor.source, in_target)
        try:
            query = metric_query(
                metrics=[monitor.metric],
                group_by=monitor.dimensions,
                grain=monitor.grain,
                start=None,
                end=None,
                where=monitor.where,
            )
            compile_metric_query(semantics, query)
        except MetricQueryError as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc


def _channel_id(value: str) -> str:
    link = _CHANNEL_LINK.match(value.strip())
    return link.group(1) if link else value.strip().lstrip("#")


def _info(monitor: Monitor, now: datetime, anomalous: bool = False, muted_until: datetime | None = None) -> MonitorInfo:
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(monitor.timezone)
    upcoming = next_fire_times(parse_schedule(monitor.cron, monitor.timezone), now, 3)
    return MonitorInfo(
        name=monitor.name,
        metric=monitor.metric,
        dimensions=monitor.dimensions,
        where=monitor.where,
        grain=monitor.grain,
        cron=monitor.cron,
        timezone=monitor.timezone,
        channel=monitor.channel,
        creator=monitor.creator_name or monitor.creator,
        origin=monitor.origin,
        anomalous_now=anomalous,
        muted_until=muted_until if muted_until is not None and muted_until > now else None,
        next_runs=[t.astimezone(zone) for t in upcoming],
    )


class ListMonitorsInput(BaseModel):
    pass


class ListMonitorsTool(Tool[ListMonitorsInput]):
    name = "list_monitors"
    description = (
        "List the metric monitors of this workspace (made in chats or by the operators): name, "
        "metric, dimensions, schedule, channel, who made it, whether it is anomalous now or muted."
    )
    Input = ListMonitorsInput
    timeout_s = 30.0
    idempotent = True
    concurrency_safe = True

    def __init__(self, store: MonitorStore, *, clock: Callable[[], datetime] = utcnow) -> None:
        self._store = store
        self._clock = clock

    async def run(self, args: ListMonitorsInput, ctx: RunContext) -> MonitorList:
        origin = ConversationOrigin.of(ctx)
        now = self._clock()
        infos = []
        for monitor in await self._store.in_workspace(origin.platform, origin.workspace):
            state = await self._store.state(monitor.name)
            infos.append(_info(monitor, now, state.anomalous, state.muted_until))
        return MonitorList(monitors=infos)


class DeleteMonitorInput(BaseModel):
    name: str = Field(..., min_length=1, max_length=64, description="The monitor's name (list_monitors).")


class DeleteMonitorTool(Tool[DeleteMonitorInput]):
    name = "delete_monitor"
    description = "Delete a metric monitor by name. Only the person who made it (or an admin) can."
    Input = DeleteMonitorInput
    timeout_s = 30.0

    def __init__(self, store: MonitorStore, admins: Iterable[str] = (), *, on_change: OnChange | None = None) -> None:
        self._store = store
        self._admins = frozenset(admins)
        self._on_change = on_change

    async def run(self, args: DeleteMonitorInput, ctx: RunContext) -> DeleteResult:
        origin = ConversationOrigin.of(ctx)
        monitor = await self._store.get(args.name)
        if monitor is None or (monitor.platform, monitor.workspace) != (origin.platform, origin.workspace):
            raise ToolError(f"There is no monitor {args.name!r} in this workspace.", ErrorType.INVALID_PARAMETERS)
        if monitor.origin == "file":
            raise ToolError(
                f"Monitor {args.name!r} is set up by the operators (BA_MONITORS_FILE); ask them to remove it.",
                ErrorType.PERMISSION_DENIED,
            )
        require_owner(origin, self._admins, monitor.creator, monitor.creator_name, f"Monitor {args.name!r}", "delete")
        await self._store.delete(args.name)
        if self._on_change is not None:
            await self._on_change()
        return DeleteResult(deleted=args.name)


def build(deps: ToolDeps) -> list[Tool]:
    """The three monitor tools, sharing one store, admin list and change callback (none
    without the scheduled work of a running service)."""
    work = deps.scheduled
    if work is None:
        return []
    return [
        CreateMonitorTool(work.monitors, deps.config, on_change=work.on_monitors_change),
        ListMonitorsTool(work.monitors),
        DeleteMonitorTool(work.monitors, work.admins, on_change=work.on_monitors_change),
    ]
