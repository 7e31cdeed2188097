"""The gateway's scheduled jobs: maintenance and scheduled reports, each run once across processes.

The jobs run on :class:`gateway.jobs.cron.RunOnceCron` (each fire time claimed by one process).
Scheduled reports live in ``report_schedules`` (`agent_core.schedules`), which every process
re-reads each minute (and at once after a change made through its own tools) and mirrors as
in-memory jobs.

The jobs:

* ``cleanup`` (hourly): expired and excess generated files (`gateway.jobs.cleanup`), run rows past
  their retention, and data-access audit records past ``BA_AUDIT_RETENTION_DAYS``;
* ``idle-threads`` (every 5 min): flags conversations idle for a while so their next request
  carries a refocus reminder (`agent_core.hooks.refocus.mark_idle_threads`);
* ``settle-reports`` (every minute): reads the outcome of report runs from the inbox and keeps
  each schedule's failure count -- two failures in a row notify the creator, ten switch the
  schedule off;
* ``report:<id>`` (each schedule's cron): puts the schedule's prompt into the inbox as a new
  conversation (`gateway.jobs.report_messages.report_message`); the dispatcher answers and posts it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import cast

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from adapters.base import DirectMessages, Mentions, Responder
from agent_core.governance.audit import prune_audit
from agent_core.i18n import language_of_text, t
from agent_core.messages import OutboundReply, utcnow
from agent_core.schedules.model import next_fire_times, parse_schedule
from agent_core.schedules.store import ScheduleStore
from agent_core.schedules.tables import ReportScheduleRow
from agent_core.store.db import session_factory
from gateway.jobs.cleanup import CleanupConfig, cleanup_data_files
from gateway.jobs.cron import RunOnceCron
from gateway.jobs.report_messages import fire_stamp, notice_message, report_event_id, report_message
from gateway.service.inbox import Inbox
from gateway.tables import EventStatus, InboundEventRow, RunOutcome, RunStatus, ScheduledRunRow

log = logging.getLogger(__name__)

REPORT_JOB_PREFIX = "report:"


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    cleanup_cron: str = "17 * * * *"  # hourly, away from the full hour when reports fire
    cleanup: CleanupConfig = CleanupConfig()
    idle_check_cron: str = "*/5 * * * *"
    idle_after: timedelta = timedelta(hours=2)
    settle_cron: str = "* * * * *"
    sync_interval_s: float = Field(60.0, gt=0)  # how often report_schedules is re-read
    misfire_grace_s: int = Field(300, ge=1)  # a run later than this (loop stalled) is skipped
    notify_after_failures: int = Field(2, ge=1)
    disable_after_failures: int = Field(10, ge=1)
    # A report run still "running" after this died with its process: it counts as failed.
    stale_run_after: timedelta = timedelta(hours=1)
    run_retention: timedelta = timedelta(days=30)
    audit_retention: timedelta = timedelta(days=365)  # BA_AUDIT_RETENTION_DAYS


def report_job_id(schedule_id: int) -> str:
    return f"{REPORT_JOB_PREFIX}{schedule_id}"


@dataclass(frozen=True)
class _UnsettledRun:
    id: int
    schedule_id: int
    fire_time: datetime
    status: str
    started_at: datetime


class Scheduler(RunOnceCron):
    """One per process: the maintenance and report jobs, and how report runs are settled."""

    def __init__(
        self,
        engine: AsyncEngine,
        inbox: Inbox,
        schedules: ScheduleStore,
        responders: Mapping[str, Responder],
        data_dir: Path,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.config = config or SchedulerConfig()
        super().__init__(engine, self.config.misfire_grace_s)
        self._engine = engine
        self._sessions = session_factory(engine)
        self._inbox = inbox
        self._schedules = schedules
        self._responders = responders
        self._data_dir = data_dir
        self._report_keys: dict[str, tuple[str, str]] = {}  # job id → (cron, tz) registered
        self._refresh_lock = asyncio.Lock()
        cfg = self.config
        self.add_job("cleanup", _cron(cfg.cleanup_cron), self._cleanup)
        self.add_job("idle-threads", _cron(cfg.idle_check_cron), self._mark_idle)
        self.add_job("settle-reports", _cron(cfg.settle_cron), self.settle_report_runs)

    def start(self) -> None:
        """Start firing (call on the running event loop); report jobs load at once."""
        # Mirroring report_schedules is every process's own business: not claimed.
        self.add_local_job(
            "sync-schedules", IntervalTrigger(seconds=self.config.sync_interval_s), self.refresh, utcnow()
        )
        super().start()

    # --- maintenance jobs -----------------------------------------------------------------------

    async def _cleanup(self, fire_time: datetime) -> None:
        await cleanup_data_files(self._engine, self._data_dir, self.config.cleanup, now=fire_time)
        await self.forget_runs(before=fire_time - self.config.run_retention)
        await prune_audit(self._sessions, self.config.audit_retention, fire_time)

    async def _mark_idle(self, fire_time: datetime) -> None:
        # Imported here: the agent's hooks load only in processes that answer.
        from agent_core.hooks.refocus import mark_idle_threads

        await mark_idle_threads(self._sessions, idle_after=self.config.idle_after, now=fire_time)

    # --- scheduled reports ----------------------------------------------------------------------

    async def refresh(self) -> None:
        """Mirror the enabled rows of ``report_schedules`` as jobs of this process."""
        async with self._refresh_lock:
            rows = {report_job_id(row.id): row for row in await self._schedules.enabled()}
            for job_id in [j for j in self._report_keys if j not in rows]:
                self.remove_job(job_id)
                del self._report_keys[job_id]
            now = utcnow()
            for job_id, row in rows.items():
                key = (row.cron, row.tz)
                if self._report_keys.get(job_id) == key:
                    continue
                # Due while no process had it registered (e.g. during a restart): run it now.
                missed = row.next_run_at is not None and now - self.grace <= row.next_run_at <= now
                self.add_job(
                    job_id,
                    parse_schedule(row.cron, row.tz),
                    partial(self._fire_report, row.id),
                    schedule_id=row.id,
                    next_run_time=row.next_run_at if missed else None,
                )
                self._report_keys[job_id] = key

    async def _fire_report(self, schedule_id: int, fire_time: datetime) -> None:
        """Enqueue one run of a schedule; a switched-off schedule enqueues nothing."""
        row = await self._schedules.get(schedule_id)
        if row is None or not row.enabled:
            return
        await self._inbox.accept(report_message(row, fire_time))
        following = next_fire_times(parse_schedule(row.cron, row.tz), fire_time, 1)
        await self._schedules.record_fire(schedule_id, fire_time, following[0] if following else None)

    async def settle_report_runs(self, now: datetime) -> None:
        """Record the outcome of finished report runs and keep each schedule's failure count.

        A run succeeded when the dispatcher answered its inbound event (status done) and failed
        when the event was given up on, when it could not be enqueued, or when its process
        died mid-run. Each run is settled once (a conditional update), in fire-time order.
        """
        async with self._engine.connect() as conn:
            # The row's types follow the model's annotations, where the keys are `int | None`
            # (unset before insert); read back here, neither is NULL (see the WHERE clause).
            runs = [
                _UnsettledRun(*cast("tuple[int, int, datetime, str, datetime]", row))
                for row in await conn.execute(
                    select(
                        col(ScheduledRunRow.id),
                        col(ScheduledRunRow.schedule_id),
                        col(ScheduledRunRow.fire_time),
                        col(ScheduledRunRow.status),
                        col(ScheduledRunRow.started_at),
                    )
                    .where(col(ScheduledRunRow.schedule_id).is_not(None), col(ScheduledRunRow.outcome).is_(None))
                    .order_by(col(ScheduledRunRow.fire_time))
                )
            ]
            if not runs:
                return
            platforms = dict(
                (
                    await conn.execute(
                        select(col(ReportScheduleRow.id), col(ReportScheduleRow.platform)).where(
                            col(ReportScheduleRow.id).in_({run.schedule_id for run in runs})
                        )
                    )
                ).all()
            )
            # The inbox stores a platform's event id as "<platform>:<event id>".
            event_ids = {
                run.id: f"{platforms[run.schedule_id]}:{report_event_id(run.schedule_id, run.fire_time)}"
                for run in runs
                if run.schedule_id in platforms
            }
            statuses = dict(
                (
                    await conn.execute(
                        select(col(InboundEventRow.event_id), col(InboundEventRow.status)).where(
                            col(InboundEventRow.event_id).in_(set(event_ids.values()))
                        )
                    )
                ).all()
            )
        for run in runs:
            if run.schedule_id not in platforms:
                outcome: RunOutcome | None = RunOutcome.SKIPPED  # the schedule row is gone
            else:
                outcome = self._outcome(run, statuses.get(event_ids[run.id]), now)
            if outcome is not None:
                await self._settle(run, outcome, now)

    def _outcome(self, run: _UnsettledRun, event_status: str | None, now: datetime) -> RunOutcome | None:
        """What became of a run, or None while that is not known yet."""
        if event_status == EventStatus.DONE.value:
            return RunOutcome.SUCCEEDED
        if event_status == EventStatus.FAILED.value:
            return RunOutcome.FAILED
        if event_status is not None:
            return None  # pending or being answered
        if run.status == RunStatus.DONE.value:
            return RunOutcome.SKIPPED  # finished without enqueueing: the schedule was off
        if run.status == RunStatus.FAILED.value:
            return RunOutcome.FAILED  # could not be enqueued
        return RunOutcome.FAILED if run.started_at < now - self.config.stale_run_after else None

    async def _settle(self, run: _UnsettledRun, outcome: RunOutcome, now: datetime) -> None:
        cfg = self.config
        failures: int | None = None
        disabled = False
        async with self._engine.begin() as conn:
            settled = await conn.execute(
                update(ScheduledRunRow)
                .where(col(ScheduledRunRow.id) == run.id, col(ScheduledRunRow.outcome).is_(None))
                .values(outcome=outcome.value, settled_at=now)
            )
            if settled.rowcount != 1 or outcome is RunOutcome.SKIPPED:
                return  # settled by another process meanwhile, or nothing to count
            schedule = col(ReportScheduleRow.id) == run.schedule_id
            if outcome is RunOutcome.SUCCEEDED:
                await conn.execute(update(ReportScheduleRow).where(schedule).values(consecutive_failures=0))
                return
            failures = (
                await conn.execute(
                    update(ReportScheduleRow)
                    .where(schedule, col(ReportScheduleRow.enabled))  # a cancelled one no longer counts
                    .values(consecutive_failures=col(ReportScheduleRow.consecutive_failures) + 1)
                    .returning(col(ReportScheduleRow.consecutive_failures))
                )
            ).scalar_one_or_none()
            if failures is not None and failures >= cfg.disable_after_failures:
                disabled = True
                await conn.execute(
                    update(ReportScheduleRow)
                    .where(schedule)
                    .values(enabled=False, disabled_reason=f"failed {failures} times in a row")
                )
        if failures is None:
            return
        log.warning("scheduled report %s failed (%d in a row)", run.schedule_id, failures)
        if disabled:
            await self.refresh()
            await self._notify(run.schedule_id, failures, now, switched_off=True)
        elif failures == cfg.notify_after_failures:
            await self._notify(run.schedule_id, failures, now, switched_off=False)

    async def _notify(self, schedule_id: int, failures: int, now: datetime, *, switched_off: bool) -> None:
        """Tell the creator, posting directly rather than through the inbox: the model answering
        inbox messages may be what fails, and a fixed notice needs no model."""
        row = await self._schedules.get(schedule_id)
        if row is None:
            return
        responder = self._responders.get(row.platform)
        if responder is None:
            log.warning("scheduled report %s: no %s responder for the notice", schedule_id, row.platform)
            return
        address = notice_message(row, now, responder.dm_address(row.creator) if isinstance(responder, DirectMessages) else None)
        mention = responder.mention(row.creator) if isinstance(responder, Mentions) and not address.is_dm else ""
        language = language_of_text(row.prompt)  # the creator wrote it; no platform locale is stored
        schedule = {"id": schedule_id, "cron": row.cron, "tz": row.tz, "prompt": _short(row.prompt), "failures": failures}
        if switched_off:
            text = t(
                language,
                "Your scheduled report #{id} ({cron}, {tz}: “{prompt}”) failed {failures} times in a row "
                "and has been switched off.",
                **schedule,
            )
        else:
            text = t(
                language,
                "Your scheduled report #{id} ({cron}, {tz}: “{prompt}”) failed {failures} times in a row. "
                "It keeps running; after {limit} failures in a row it is switched off. Ask me to cancel "
                "schedule #{id} if it is no longer needed.",
                limit=self.config.disable_after_failures,
                **schedule,
            )
        text = mention + text
        delivery_id = f"schedule-{schedule_id}-{'off' if switched_off else 'failing'}-{fire_stamp(now)}"
        try:
            await responder.deliver(address, OutboundReply(text=text), delivery_id)
        except Exception:
            log.exception("scheduled report %s: the failure notice could not be posted", schedule_id)


def _cron(expression: str) -> CronTrigger:
    return CronTrigger.from_crontab(expression, timezone=UTC)


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
