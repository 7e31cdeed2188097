"""Everything the service runs on, built once from `Settings` and closed once, in layers.

`Stores` (the database and the stores on it) come first: the platforms' adapters are built on
them (`gateway.service.platforms`). The `Runtime` adds the platforms' responders, as a mapping
that never changes, and the jobs that post through them. `Answering` is what only a process
that answers has: the agent (model client, tools, the analytics stack), the dispatcher and the
catalog's refresh. The accepting `serve` process never builds it, so it starts fast and stays
small.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

if TYPE_CHECKING:
    from agent_core.loop import AgentLoop
    from gateway.service.dispatcher import Dispatcher

from adapters.base import DirectMessages, Responder
from agent_core.governance.approval_store import ApprovalStore
from agent_core.messages import InboundMessage
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import ChatOrigin, RunDeps
from agent_core.schedules.store import ScheduleStore
from agent_core.store.db import create_engine, session_factory, sqlite_checkpointer
from agent_core.store.threads import ThreadStore
from gateway.config import Settings
from gateway.jobs.cleanup import CleanupConfig
from gateway.jobs.monitors import MonitorJobs, MonitorRunner
from gateway.jobs.scheduler import Scheduler, SchedulerConfig
from gateway.service.inbox import Inbox
from gateway.service.outbound import OutboundLedger

log = logging.getLogger(__name__)

CATALOG_CHECK_CRON = "41 * * * *"  # away from the full hour, when reports fire


def scheduler_config(settings: Settings) -> SchedulerConfig:
    return SchedulerConfig(
        cleanup=CleanupConfig(
            ttl=timedelta(hours=settings.file_ttl_hours),
            size_cap_bytes=int(settings.data_size_cap_gb * 1024**3),
        ),
        idle_after=timedelta(minutes=settings.idle_after_minutes),
        audit_retention=timedelta(days=settings.audit_retention_days),
    )


@dataclass(frozen=True)
class Stores:
    """The settings, the service database and the stores on it: what platforms are built on."""

    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    store: ThreadStore
    inbox: Inbox
    ledger: OutboundLedger
    schedules: ScheduleStore
    approvals: ApprovalStore
    monitors: MonitorStore


def open_stores(settings: Settings) -> Stores:
    """Create the engine and the stores (no I/O yet)."""
    engine = create_engine(settings.effective_database_url)
    sessions = session_factory(engine)
    return Stores(
        settings, engine, sessions, ThreadStore(sessions),
        Inbox(engine, flush_before_ack=settings.inbox_durability == "flush"), OutboundLedger(engine),
        ScheduleStore(sessions), ApprovalStore(sessions), MonitorStore(sessions, settings.monitors),
    )  # fmt: skip


@dataclass(frozen=True)
class Runtime(Stores):
    """The stores, the responders of the platforms this process answers through, and the jobs
    that post through them (fired only where `start_answering` starts the scheduler)."""

    responders: Mapping[str, Responder]
    scheduler: Scheduler
    monitor_jobs: MonitorJobs

    @classmethod
    def build(cls, stores: Stores, responders: Mapping[str, Responder]) -> Runtime:
        """The runtime over `stores`, answering through `responders` (by platform name)."""
        settings = stores.settings
        scheduler = Scheduler(
            stores.engine, stores.inbox, stores.schedules, responders, settings.data_dir, scheduler_config(settings)
        )
        runner = MonitorRunner(stores.monitors, responders, settings, stores.sessions)
        monitor_jobs = MonitorJobs(scheduler, stores.monitors, runner)
        return cls(**vars(stores), responders=responders, scheduler=scheduler, monitor_jobs=monitor_jobs)

    def build_agent(self) -> AgentLoop | None:
        """The agent that answers, or None when no model is configured (answers say so)."""
        if not self.settings.model_configured:
            return None
        from agent_core.agent import build_agent
        from agent_core.scheduled_work import ScheduledWork

        scheduled = ScheduledWork(
            self.schedules,
            self.monitors,
            admins=frozenset(self.settings.schedule_admins),
            dm_address=self.dm_address,
            on_schedules_change=self.scheduler.refresh,
            on_monitors_change=self.monitor_jobs.sync,
        )
        return build_agent(self.settings, self.store, self.sessions, scheduled=scheduled)

    def dm_address(self, platform: str, user: str) -> str | None:
        responder = self.responders.get(platform)
        return responder.dm_address(user) if isinstance(responder, DirectMessages) else None

    def run_deps(self, msg: InboundMessage, thread_id: str) -> RunDeps:
        return RunDeps(
            thread_id=thread_id,
            data_dir=self.settings.data_dir,
            channel=msg.channel,
            user=msg.user,
            is_dm=msg.is_dm,
            chat=ChatOrigin.of(msg),
            language=msg.language,
            scheduled_run=msg.scheduled_run,
        )

    def start_answering(self, *, jobs: bool = True, on_capacity: Callable[[bool], None] | None = None) -> Answering:
        """Answer the inbox in this process: the dispatcher and, with `jobs`, the scheduler's
        jobs and the schema catalog's refresh (`chat` answers its terminal without them).
        `on_capacity` hears whether the dispatcher can take more work (see `Dispatcher`)."""
        from agent_core.data.upload_limits import UploadLimits
        from gateway.service.approval_flow import ApprovalFlow
        from gateway.service.dispatcher import Dispatcher
        from gateway.service.menu import MenuAnswers

        settings = self.settings
        agent = self.build_agent()
        checkpointer = asyncio.create_task(sqlite_checkpointer(self.engine))
        approvals = ApprovalFlow(
            self.approvals, self.inbox, timedelta(minutes=settings.approval_ttl_minutes), settings.poll_interval_s
        )
        dispatcher = Dispatcher(
            inbox=self.inbox,
            ledger=self.ledger,
            store=self.store,
            agent=agent,
            responders=self.responders,
            run_deps=self.run_deps,
            approvals=approvals,
            menu=MenuAnswers(self.store, self.monitors, self.schedules),
            concurrency=settings.max_concurrent_turns,
            lease_seconds=settings.lease_seconds,
            poll_interval_s=settings.poll_interval_s,
            upload_limits=UploadLimits(max_bytes=settings.max_upload_mb * 1024**2),
            on_capacity=on_capacity,
        )
        dispatcher.start()
        catalog_refresh = None
        if jobs:
            if settings.datasources:  # the schema catalog behind search_schema
                catalog_refresh = self._schedule_catalog_refresh()
            self.monitor_jobs.install()
            self.scheduler.start()
        return Answering(agent, dispatcher, self.scheduler, checkpointer, catalog_refresh)

    def _schedule_catalog_refresh(self) -> asyncio.Task[object]:
        """Refresh the sources not refreshed lately now (the task doing it), then check hourly."""
        from apscheduler.triggers.cron import CronTrigger

        from agent_core.catalog.refresh import refresh_at_start_up

        settings = self.settings
        at_start_up = refresh_at_start_up(settings.datasources, self.sessions, settings.catalog_refresh_hours)
        # Checked hourly, claimed by one process; only sources older than the period are read.
        check = CronTrigger.from_crontab(CATALOG_CHECK_CRON, timezone=UTC)
        self.scheduler.add_job("catalog-refresh", check, self._refresh_catalog)
        return at_start_up

    async def _refresh_catalog(self, _fire_time: datetime) -> None:
        from agent_core.catalog.refresh import refresh_catalog

        stale_after = timedelta(hours=self.settings.catalog_refresh_hours)
        await refresh_catalog(self.settings.datasources, self.sessions, stale_after=stale_after)

    async def close(self) -> None:
        """Close the responders and the database; an `Answering` over it is closed first."""
        for responder in self.responders.values():
            await responder.close()
        await self.inbox.close()
        await self.engine.dispose()


@dataclass(frozen=True)
class Answering:
    """What exists only in a process that answers the inbox (`Runtime.start_answering`)."""

    agent: AgentLoop | None  # None when no model is configured: answers say so
    dispatcher: Dispatcher
    scheduler: Scheduler  # the runtime's, firing here when jobs were started
    checkpointer: asyncio.Task[None]
    catalog_refresh: asyncio.Task[object] | None  # the start-up refresh, with data sources

    async def close(self) -> None:
        """Stop answering: no new runs, the dispatcher wound down, the agent's clients closed."""
        await self.scheduler.stop()  # first: no new runs while the dispatcher winds down
        await self.dispatcher.stop()
        if self.agent is not None:
            await self.agent.aclose()
        if self.catalog_refresh is not None:
            self.catalog_refresh.cancel()
        self.checkpointer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.checkpointer
