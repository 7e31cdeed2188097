"""A cron that runs each job once across all processes: claim the run, then run it.

Every gateway process runs one APScheduler ``AsyncIOScheduler`` with the same jobs. Each time
a job fires, the process first *claims the run*: it inserts a ``scheduled_runs`` row keyed by
(job id, scheduled fire time), which a unique constraint admits once. The process whose insert
succeeds runs the job; the others skip it. There is no leader to elect, hand over or lose, and
a process that dies only misses the runs it had not claimed yet -- the others claim those.
Fire times come from cron triggers, so every process computes the same ones (interval
triggers would depend on when each process started); clock skew below a job's period does not
matter, since the claim is keyed by the scheduled time, not by the time the process woke up.

Jobs are not stored with APScheduler: they are code, or mirrored from the database by the
caller (:meth:`RunOnceCron.add_job` / :meth:`RunOnceCron.remove_job`). APScheduler's
``SQLAlchemyJobStore`` would add nothing but trouble here: it is synchronous (it would block
the event loop), it pickles callables (fragile across deployments), and APScheduler 3 does not
support several schedulers sharing one job store -- each would still run every job.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from sqlalchemy import delete, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from agent_core.messages import new_id, utcnow
from gateway.tables import RunStatus, ScheduledRunRow

log = logging.getLogger(__name__)

JobBody = Callable[[datetime], Awaitable[object]]


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
    schedule_id: int | None = None  # the report schedule a run belongs to, kept with its claim


class RunOnceCron:
    """One per process: the APScheduler instance and the jobs it fires, each run claimed once."""

    def __init__(self, engine: AsyncEngine, misfire_grace_s: int) -> None:
        self._claims = RunClaims(engine)
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self.grace = timedelta(seconds=misfire_grace_s)  # how late a run may still start
        self._aps = AsyncIOScheduler(
            timezone=UTC,
            job_defaults={
                "coalesce": True,  # after a stall, run once, not once per missed time
                "max_instances": 1,
                "misfire_grace_time": misfire_grace_s,
            },
        )
        self._jobs: dict[str, _Job] = {}
        self._running: set[asyncio.Task[object]] = set()
        self._started = False

    def start(self) -> None:
        """Start firing (call on the running event loop)."""
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
            fire_time = latest_fire_time(job.trigger, utcnow(), self.grace)
            if fire_time is None:
                log.warning("job %s woke up with no fire time in the last %s", job_id, self.grace)
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

    def add_local_job(
        self, job_id: str, trigger: BaseTrigger, body: Callable[[], Awaitable[Any]], next_run_time: datetime
    ) -> None:
        """Fire ``body()`` on ``trigger`` in this process, unclaimed: work every process does
        for itself (e.g. re-reading what to schedule)."""
        self._aps.add_job(body, trigger, id=job_id, next_run_time=next_run_time)

    async def forget_runs(self, before: datetime) -> None:
        """Drop the claims of runs that fired before ``before``."""
        await self._claims.purge(before)
