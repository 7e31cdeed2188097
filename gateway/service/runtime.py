"""Everything the service runs on, built once from `Settings` and closed once.

The agent (model client, tools, the analytics stack) is built only by a process that answers
(`start_dispatcher`): the accepting `serve` process never imports it, so it starts fast and
stays small.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
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


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    store: ThreadStore
    inbox: Inbox
    ledger: OutboundLedger
    scheduler: Scheduler
    schedules: ScheduleStore
    approvals: ApprovalStore
    monitors: MonitorStore
    monitor_jobs: MonitorJobs
    responders: dict[str, Responder] = field(default_factory=dict)
    agent: AgentLoop | None = None
    dispatcher: Dispatcher | None = None
    _checkpointer: asyncio.Task[None] | None = None
    _catalog_refresh: asyncio.Task | None = None

    @classmethod
    def build(cls, settings: Settings) -> Runtime:
        """Create engine and stores (no I/O yet)."""
        engine = create_engine(settings.effective_database_url)
        sessions = session_factory(engine)
        store = ThreadStore(sessions)
        inbox = Inbox(engine)
        responders: dict[str, Responder] = {}  # shared with the scheduler; adapters fill it
        schedules = ScheduleStore(sessions)
        scheduler = Scheduler(
            engine, inbox, schedules, responders, settings.data_dir, scheduler_config(settings)
        )
        monitors = MonitorStore(sessions, settings.monitors)
        monitor_jobs = MonitorJobs(scheduler, monitors, MonitorRunner(monitors, responders, settings, sessions))
        return cls(
            settings, engine, sessions, store, inbox, OutboundLedger(engine), scheduler, schedules,
            ApprovalStore(sessions), monitors, monitor_jobs, responders,
        )  # fmt: skip

    def build_agent(self) -> AgentLoop | None:
        """The agent that answers, or None when no model is configured (answers say so)."""
        if not self.settings.model_configured:
            return None
        from agent_core.agent import build_agent
        from agent_core.tools.deps import ScheduledWork

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

    def start_dispatcher(self) -> None:
        from agent_core.data.upload_limits import UploadLimits
        from gateway.service.dispatcher import Dispatcher
        from gateway.service.menu import MenuAnswers

        self.agent = self.build_agent()
        self._checkpointer = asyncio.create_task(sqlite_checkpointer(self.engine))
        self.dispatcher = Dispatcher(
            inbox=self.inbox,
            ledger=self.ledger,
            store=self.store,
            agent=self.agent,
            responders=self.responders,
            run_deps=self.run_deps,
            concurrency=self.settings.max_concurrent_turns,
            lease_seconds=self.settings.lease_seconds,
            poll_interval_s=self.settings.poll_interval_s,
            upload_limits=UploadLimits(max_bytes=self.settings.max_upload_mb * 1024**2),
            approvals=self.approvals,
            approval_ttl=timedelta(minutes=self.settings.approval_ttl_minutes),
            menu=MenuAnswers(self.store, self.monitors, self.schedules),
        )
        self.dispatcher.start()

    def start_answering(self) -> None:
        """Answer the inbox in this process: the dispatcher and the scheduler's jobs."""
        self.start_dispatcher()
        if self.settings.datasources:  # the schema catalog behind search_schema
            from apscheduler.triggers.cron import CronTrigger

            from agent_core.catalog.refresh import refresh_at_start_up

            settings = self.settings
            self._catalog_refresh = refresh_at_start_up(settings.datasources, self.sessions, settings.catalog_refresh_hours)
            # Checked hourly, claimed by one process; only sources older than the period are read.
            check = CronTrigger.from_crontab(CATALOG_CHECK_CRON, timezone=UTC)
            self.scheduler.add_job("catalog-refresh", check, self._refresh_catalog)
        self.monitor_jobs.install()
        self.scheduler.start()

    async def _refresh_catalog(self, _fire_time: datetime) -> None:
        from agent_core.catalog.refresh import refresh_catalog

        stale_after = timedelta(hours=self.settings.catalog_refresh_hours)
        await refresh_catalog(self.settings.datasources, self.sessions, stale_after=stale_after)

    async def close(self) -> None:
        await self.scheduler.stop()  # first: no new runs while the dispatcher winds down
        if self.dispatcher is not None:
            await self.dispatcher.stop()
        if self.agent is not None:
            await self.agent.aclose()
        if self._catalog_refresh is not None:
            self._catalog_refresh.cancel()
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
        for responder in self.responders.values():
            close = getattr(responder, "close", None)
            if close is not None:
                await close()
        await self.inbox.close()
        await self.engine.dispose()
