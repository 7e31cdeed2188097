"""Running metric monitors: one claimed cron job per monitor, an alert at each onset.

Every answering process mirrors the monitors (the operators' file and those made in chats) as
jobs ``monitor:<name>`` of its `RunOnceCron` (re-read each minute, and at once after a change
made through its own tools); each fire time is claimed by one process. A run judges the
latest complete period (`agent_core.monitors.check`) with the creator's permissions in the
target channel and compares the verdict with the previous run's:

- anomalous now, not before: an onset. One alert is posted (`AlertPosting.post_alert`, or a
  plain message on a platform without alert buttons) unless the monitor is muted; while the
  episode lasts, later runs post nothing;
- not anomalous now, anomalous before: the recovery is noted in the alert's thread;
- a muted monitor keeps its state but posts nothing until the mute ends;
- a run for an earlier period than the last one judged (a replay, `ba-agent monitors run
  --at` a past day) posts nothing and leaves the state alone: it would otherwise note a
  recovery under the current alert and let the next scheduled run alert a second time. It
  says what it would have posted had it been the latest run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Literal

from apscheduler.triggers.interval import IntervalTrigger
from pydantic import BaseModel

from adapters.base import ActOnAlert, AlertPosting, Responder
from agent_core.config import AgentConfig
from agent_core.i18n import t
from agent_core.messages import OutboundReply, new_id, utcnow
from agent_core.monitors.model import AlertClick, AlertView, Monitor, MonitorAction
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.schedules.model import parse_schedule
from gateway.jobs.cron import RunOnceCron

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

    from agent_core.semantic.cubes import MetricCubes

log = logging.getLogger(__name__)

MONITOR_JOB_PREFIX = "monitor:"
SYNC_INTERVAL_S = 60.0


class MonitorError(Exception):
    """A run could not post (its platform is not configured here)."""


class MonitorRun(BaseModel):
    """What one run found and did."""

    monitor: str
    period: str | None = None  # the period judged (None: the source has no value for it yet)
    anomalous: bool = False
    posted: Literal["alert", "recovery"] | None = None
    muted: bool = False
    alert: AlertView | None = None
    # The period judged is earlier than the state's last one: nothing was posted or remembered,
    # and ``posted`` / ``alert`` say what the run would have posted for that period alone.
    replay_of: str | None = None  # the state's last period, when this run was a replay


class MonitorRunner:
    """Runs one monitor at a fire time and posts what it finds."""

    def __init__(
        self,
        store: MonitorStore,
        responders: Mapping[str, Responder],
        config: AgentConfig,
        sessions: async_sessionmaker[AsyncSession],
    ) -> None:
        self._store = store
        self._responders = responders
        self._config = config
        self._sessions = sessions
        self._cubes: MetricCubes | None = None

    async def run(self, name: str, fire_time: datetime, *, post: bool = True) -> MonitorRun:
        """Judge ``name``'s latest complete period at ``fire_time``; with ``post`` False, only
        say what would be posted (nothing is posted or remembered)."""
        from agent_core.monitors.alert import build_alert
        from agent_core.monitors.check import evaluate

        monitor = await self._store.get(name)
        if monitor is None:
            raise MonitorError(f"there is no monitor {name!r}")
        responder = self._responders.get(monitor.platform)
        if post and responder is None:
            raise MonitorError(f"monitor {name!r} posts to {monitor.platform}, which is not configured here")
        state = await self._store.state(name)
        ctx = _run_context(monitor, self._config)
        cubes = await self._metric_cubes()
        evaluation = await evaluate(monitor, fire_time, cubes, ctx)
        if evaluation is None:
            return MonitorRun(monitor=name)
        muted = state.muted_until is not None and fire_time < state.muted_until
        run = MonitorRun(
            monitor=name, period=evaluation.period.start.isoformat(), anomalous=evaluation.anomalous, muted=muted
        )
        if run.period is not None and state.last_period is not None and run.period < state.last_period:
            # ISO dates compare as strings. The episode belongs to the latest period.
            run.replay_of = state.last_period
            if evaluation.anomalous:
                chart_dir = self._config.data_dir / "monitors" / name
                run.alert = await build_alert(new_id()[:16], monitor, evaluation, cubes, ctx, chart_dir)
                run.posted = "alert"
            return run
        if evaluation.anomalous and not state.anomalous and not muted:
            chart_dir = self._config.data_dir / "monitors" / name
            run.alert = await build_alert(new_id()[:16], monitor, evaluation, cubes, ctx, chart_dir)
            run.posted = "alert"
        elif state.anomalous and not evaluation.anomalous and state.alert_id and not muted:
            run.posted = "recovery"
        if not post:
            return run
        assert responder is not None
        if run.alert is not None:
            await self._store.save_alert(run.alert)  # first: a click finds it
            if isinstance(responder, AlertPosting):
                run.alert.message_ref = await responder.post_alert(run.alert)
            else:  # no buttons: the alert as a message (no thread to note the recovery in)
                alert = OutboundReply(text=run.alert.markdown(), files=[run.alert.chart] if run.alert.chart else [])
                await responder.deliver(run.alert.address(), alert, f"monitor-alert-{run.alert.id}")
            await self._store.save_alert(run.alert)
        elif run.posted == "recovery" and state.alert_id:
            await self._note_recovery(responder, monitor, state.alert_id, run)
        if evaluation.anomalous and not state.anomalous:
            state.alert_id = run.alert.id if run.alert is not None else None
        elif not evaluation.anomalous:
            state.alert_id = None
        state.anomalous, state.last_period, state.last_run_at = evaluation.anomalous, run.period, fire_time
        await self._store.save_run(state)
        return run

    async def _note_recovery(self, responder: Responder, monitor: Monitor, alert_id: str, run: MonitorRun) -> None:
        alert = await self._store.alert(alert_id)
        if alert is None or alert.message_ref is None:
            return
        text = t(
            monitor.language,
            "Recovered: {metric} is back within its normal range on {day} (monitor {name}).",
            metric=monitor.metric,
            day=run.period,
            name=monitor.name,
        )
        await responder.deliver(alert.address(in_thread=True), OutboundReply(text=text), f"monitor-recovery-{alert_id}")

    async def _metric_cubes(self) -> MetricCubes:
        if self._cubes is None:
            from agent_core.data.demo import demo_database_path, ensure_demo_database
            from agent_core.governance.access import SourceAccess
            from agent_core.governance.audit import audit_trail
            from agent_core.semantic.cubes import MetricCubes

            # The demo metrics read the demo database, which a process without the agent's
            # tools (no model configured) has not built.
            await asyncio.to_thread(ensure_demo_database, demo_database_path(self._config.data_dir))
            config = self._config
            audit = audit_trail(self._sessions, config.datasources, config.user_daily_rows)
            access = SourceAccess(config.datasources, config.access_policy, audit)
            self._cubes = MetricCubes(self._config, access, tool=MONITOR_TOOL)  # audited as the monitor's reads
        return self._cubes


MONITOR_TOOL = "monitor"  # the tool name a monitor run's source reads are audited under


def _run_context(monitor: Monitor, config: AgentConfig) -> RunContext:
    """The creator's context in the target channel: the run may read only what both the creator
    and the channel may (agent_core.governance.audience.JointAudience)."""
    return RunContext(
        thread_id=f"monitor-{monitor.name}",
        data_dir=config.data_dir,
        channel=monitor.channel,
        user=monitor.creator,
        chat=ChatOrigin(platform=monitor.platform, workspace=monitor.workspace, user_name=monitor.creator_name),
        tool_call_id=f"monitor:{monitor.name}",
        tool_name="monitor",
        language=monitor.language,
        scheduled_run=f"monitor:{monitor.name}",  # the creator's access joined with the channel's
    )


def monitor_job_id(name: str) -> str:
    return f"{MONITOR_JOB_PREFIX}{name}"


class MonitorJobs:
    """The monitors mirrored as claimed jobs of one process's cron."""

    def __init__(self, cron: RunOnceCron, store: MonitorStore, runner: MonitorRunner) -> None:
        self._cron = cron
        self._store = store
        self.runner = runner
        self._keys: dict[str, tuple[str, str]] = {}  # job id → (cron, time zone) registered
        self._lock = asyncio.Lock()

    def install(self) -> None:
        """Mirror the monitors now and every minute (each process for itself: not claimed)."""
        trigger = IntervalTrigger(seconds=SYNC_INTERVAL_S)
        self._cron.add_local_job("sync-monitors", trigger, self.sync, utcnow())

    async def sync(self) -> None:
        async with self._lock:
            monitors = {monitor_job_id(m.name): m for m in await self._store.all()}
            for job_id in [j for j in self._keys if j not in monitors]:
                self._cron.remove_job(job_id)
                del self._keys[job_id]
            for job_id, monitor in monitors.items():
                key = (monitor.cron, monitor.timezone)
                if self._keys.get(job_id) != key:
                    trigger = parse_schedule(monitor.cron, monitor.timezone)
                    self._cron.add_job(job_id, trigger, partial(self._fire, monitor.name))
                    self._keys[job_id] = key

    async def _fire(self, name: str, fire_time: datetime) -> None:
        run = await self.runner.run(name, fire_time)
        log.info("monitor %s judged %s: %s", name, run.period, run.posted or "nothing to post")


def alert_actions(store: MonitorStore, clock: Callable[[], datetime] = utcnow) -> ActOnAlert:
    """The click handler adapters get (`adapters.base.ActOnAlert`)."""

    async def act(alert_id: str, action: MonitorAction, user: str) -> AlertClick | None:
        return await store.act(alert_id, action, user, clock())

    return act
