"""The scheduler: periodic maintenance jobs and scheduled reports, run once across all processes.

Every gateway process runs one APScheduler ``AsyncIOScheduler`` with the same jobs. Each time
a job fires, the process first *claims the run*: it inserts a ``scheduled_runs`` row keyed by
(job id, scheduled fire time), which a unique constraint admits once. The process whose insert
succeeds runs the job; the others skip it. There is no leader to elect, hand over or lose, and
a process that dies only misses the runs it had not claimed yet -- the others claim those.
Fire times come from cron triggers, so every process computes the same ones (interval
triggers would depend on when each process started); clock skew below a job's period does not
matter, since the claim is keyed by the scheduled time, not by the time the process woke up.

Jobs are not stored with APScheduler. The maintenance jobs are code; scheduled reports live in
``report_schedules`` (`gateway.schedules`), which every process re-reads each minute (and at
once after a change made through its own tools) and mirrors as in-memory jobs. APScheduler's
``SQLAlchemyJobStore`` would add nothing but trouble here: it is synchronous (it would block
the event loop), it pickles callables (fragile across deployments), and APScheduler 3 does not
support several schedulers sharing one job store -- each would still run every job.

The jobs:

* ``cleanup`` (hourly): expired and excess generated files (`gateway.cleanup`), and run rows
  past their retention;
* ``idle-threads`` (every 5 min): flags conversations idle for a while so their next request
  carries a refocus reminder (`agent_core.hooks.refocus.mark_idle_threads`);
* ``settle-reports`` (every minute): reads the outcome of report runs from the inbox and keeps
  each schedule's failure count -- two failures in a row notify the creator, ten switch the
  schedule off;
* ``report:<id>`` (each schedule's cron): puts the schedule's prompt into the inbox as a new
  conversation (`gateway.schedules.report_message`); the dispatcher answers and posts it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import cast

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from adapters.base import Responder
from agent_core.messages import OutboundReply, new_id, utcnow
from agent_core.store.db import session_factory
from gateway.cleanup import CleanupConfig, cleanup_data_files
from gateway.inbox import Inbox
from gateway.schedules import (
    ScheduleStore,
    fire_stamp,
    next_fire_times,
    notice_message,
    parse_schedule,
    report_event_id,
    report_message,
)
from gateway.tables import (
    EventStatus,
    InboundEventRow,
    ReportScheduleRow,
    RunOutcome,
    RunStatus,
    ScheduledRunRow,
)

log = logging.getLogger(__name__)

REPORT_JOB_PREFIX = "report:"
JobBody = Callable[[datetime], Awaitable[object]]


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


def report_job_id(schedule_id: int) -> str:
    return f"{REPORT_JOB_PREFIX}{schedule_id}"


def latest_fire_time(trigger: BaseTrigger, now: datetime, grace: timedelta) -> datetime | None:
    """The trigger's last fire time at or before ``now``, looking back at most ``grace``.

    APScheduler does not hand a job its scheduled time; recomputing it from the trigger gives
    every process the same value for the same run, which is what the claim is keyed by.
    """
    latest = None
    fire = trigger.get_next_fire_time(None, now - grace)
    while fire is not None and fire <= now:
        latest = fire
        fire = trigger.get_next_fire_time(fire, fire + timedelta(microseconds=1))
    return latest


class RunClaims:
    """The ``scheduled_runs`` table: who runs which (job, fire time), and how it went."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    async def claim(
        self, job_id: str, fire_time: datetime, owner: str, schedule_id: int | None = None
    ) -> int | None:
        """The new run's id, or None when another process (or an earlier call) claimed it."""
        stmt = (
            self._insert(ScheduledRunRow)
            .values(
                job_id=job_id,
                fire_time=fire_time,
                schedule_id=schedule_id,
                owner=owner,
                status=RunStatus.RUNNING.value,
                started_at=utcnow(),
            )
            .on_conflict_do_nothing()
            .returning(col(ScheduledRunRow.id))
        )
        async with self._engine.begin() as conn:
            return (await conn.execute(stmt)).scalar_one_or_none()

    async def finish(self, run_id: int, error: str | None = None) -> None:
        status = RunStatus.FAILED if error else RunStatus.DONE
        async with self._engine.begin() as conn:
            await conn.execute(
                update(ScheduledRunRow)
                .where(col(ScheduledRunRow.id) == run_id)
                .values(status=status.value, error=error, finished_at=utcnow())
            )

    async def purge(self, before: datetime) -> None:
        """Forget runs that fired before ``before``."""
        async with self._engine.begin() as conn:
            await conn.execute(delete(ScheduledRunRow).where(col(ScheduledRunRow.fire_time) < before))


@dataclass(frozen=True)
class _Job:
    trigger: BaseTrigger
    body: JobBody
    schedule_id: int | None = None


@dataclass(frozen=True)
class _UnsettledRun:
    id: int
    schedule_id: int
    fire_time: datetime
    status: str
    started_at: datetime


class Scheduler:
    """One per process: the APScheduler instance, the job catalogue and the job bodies."""

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
        self._engine = engine
        self._sessions = session_factory(engine)
        self._inbox = inbox
        self._schedules = schedules
        # The runtime's dict: adapters register their responders after the scheduler is built.
        self._responders = responders
        self._data_dir = data_dir
        self._claims = RunClaims(engine)
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self._aps = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={
                "coalesce": True,  # after a stall, run once, not once per missed time
                "max_instances": 1,
                "misfire_grace_time": self.config.misfire_grace_s,
            },
        )
        self._jobs: dict[str, _Job] = {}
        self._report_keys: dict[str, tuple[str, str]] = {}  # job id → (cron, tz) registered
        self._refresh_lock = asyncio.Lock()
        self._running: set[asyncio.Task[object]] = set()
        self._started = False
        cfg = self.config
        self.add_job("cleanup", _cron(cfg.cleanup_cron), self._cleanup)
        self.add_job("idle-threads", _cron(cfg.idle_check_cron), self._mark_idle)
        self.add_job("settle-reports", _cron(cfg.settle_cron), self.settle_report_runs)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start firing (call on the running event loop); report jobs load at once."""
        # Mirroring report_schedules is every process's own business: not claimed.
        self._aps.add_job(
            self.refresh,
            IntervalTrigger(seconds=self.config.sync_interval_s),
            id="sync-schedules",
            next_run_time=utcnow(),
        )
        self._aps.start()
        self._started = True

    async def stop(self) -> None:
        """Stop firing and cancel runs in progress (their claims stay: they are not retried)."""
        if self._started:
            self._aps.shutdown(wait=False)
            self._started = False
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        await asyncio.sleep(0)  # let the scheduler's deferred shutdown run

    def add_job(
        self,
        job_id: str,
        trigger: BaseTrigger,
        body: JobBody,
        *,
        schedule_id: int | None = None,
        next_run_time: datetime | None = None,
    ) -> None:
        """Fire ``body(fire_time)`` on ``trigger``, once across all processes per fire time.

        ``next_run_time`` overrides the first fire time (the trigger's next one by default).
        """
        self._jobs[job_id] = _Job(trigger, body, schedule_id)
        # APScheduler reads an explicit next_run_time=None as "paused": only pass a real one.
        first = {} if next_run_time is None else {"next_run_time": next_run_time}
        self._aps.add_job(self._on_fire, trigger, args=[job_id], id=job_id, replace_existing=True, **first)

    def remove_job(self, job_id: str) -> None:
        if self._jobs.pop(job_id, None) is not None:
            self._aps.remove_job(job_id)

    async def _on_fire(self, job_id: str) -> None:
        """APScheduler's entry point: work out which run this is, then claim and run it."""
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            job = self._jobs.get(job_id)
            if job is None:
                return
            grace = timedelta(seconds=self.config.misfire_grace_s)
            fire_time = latest_fire_time(job.trigger, utcnow(), grace)
            if fire_time is None:
                log.warning("job %s woke up with no fire time in the last %s", job_id, grace)
                return
            await self.run(job_id, fire_time)
        finally:
            self._running.discard(task)

    async def run(self, job_id: str, fire_time: datetime) -> bool:
        """Claim the run of ``job_id`` at ``fire_time`` and run it; False when it was claimed
        elsewhere. A failing body is logged and recorded with the run, never raised."""
        job = self._jobs[job_id]
        run_id = await self._claims.claim(job_id, fire_time, self._owner, job.schedule_id)
        if run_id is None:
            log.debug("job %s at %s runs elsewhere", job_id, fire_time)
            return False
        try:
            await job.body(fire_time)
        except Exception as exc:
            log.exception("job %s at %s failed", job_id, fire_time)
            await self._claims.finish(run_id, f"{type(exc).__name__}: {exc}")
        else:
            await self._claims.finish(run_id)
        return True

    # --- maintenance jobs -----------------------------------------------------------------------

    async def _cleanup(self, fire_time: datetime) -> None:
        await cleanup_data_files(self._engine, self._data_dir, self.config.cleanup, now=fire_time)
        await self._claims.purge(fire_time - self.config.run_retention)

    async def _mark_idle(self, fire_time: datetime) -> None:
        # Imported here: the agent's hooks load only in processes that answer.
        from agent_core.hooks.refocus import mark_idle_threads

        await mark_idle_threads(self._sessions, idle_after=self.config.idle_after, now=fire_time)

    # --- scheduled reports ----------------------------------------------------------------------

    async def refresh(self) -> None:
        """Mirror the enabled rows of ``report_schedules`` as jobs of this process."""
        async with self._refresh_lock:
            rows = {report_job_id(row.id): row for row in await self._schedules.enabled() if row.id}
            for job_id in [j for j in self._report_keys if j not in rows]:
                self.remove_job(job_id)
                del self._report_keys[job_id]
            now = utcnow()
            grace = timedelta(seconds=self.config.misfire_grace_s)
            for job_id, row in rows.items():
                key = (row.cron, row.tz)
                if self._report_keys.get(job_id) == key:
                    continue
                assert row.id is not None
                # Due while no process had it registered (e.g. during a restart): run it now.
                missed = row.next_run_at is not None and now - grace <= row.next_run_at <= now
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
        address = notice_message(row, now, responder.dm_address(row.creator))
        mention = "" if address.is_dm else responder.mention(row.creator)
        head = f"{mention}Your scheduled report #{schedule_id} ({row.cron}, {row.tz}: “{_short(row.prompt)}”)"
        if switched_off:
            text = f"{head} failed {failures} times in a row and has been switched off."
        else:
            text = (
                f"{head} failed {failures} times in a row. It keeps running; after "
                f"{self.config.disable_after_failures} failures in a row it is switched off. "
                f"Ask me to cancel schedule #{schedule_id} if it is no longer needed."
            )
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
