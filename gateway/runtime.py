"""Everything the service runs on, built once from `Settings` and closed once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from adapters.base import Responder
from agent_core.agent import build_agent
from agent_core.config import AgentConfig
from agent_core.data.uploads import UploadLimits
from agent_core.loop import AgentLoop
from agent_core.messages import InboundMessage
from agent_core.store.db import create_engine, session_factory, sqlite_checkpointer
from agent_core.store.threads import ThreadStore
from agent_core.tools.base import ToolContext
from agent_core.context.compression import CompressionConfig
from agent_core.hooks.refocus import RefocusConfig
from agent_core.tokens import BudgetConfig
from gateway.cleanup import CleanupConfig
from gateway.config import Settings
from gateway.scheduler import Scheduler, SchedulerConfig
from gateway.schedules import ScheduleStore, conversation_extras, schedule_tools
from gateway.dispatcher import Dispatcher
from gateway.inbox import Inbox
from gateway.outbound import OutboundLedger

log = logging.getLogger(__name__)


def agent_config(settings: Settings) -> AgentConfig:
    return AgentConfig(
        api_key=settings.anthropic_api_key,
        base_url=settings.anthropic_base_url,
        model=settings.model,
        max_tokens=settings.max_tokens,
        max_iterations=settings.max_iterations,
        model_retries=settings.model_retries,
        model_timeout_s=settings.model_timeout_s,
        data_dir=settings.data_dir.resolve(),
        skills_dir=settings.skills_dir,
        compression=CompressionConfig(threshold=settings.compress_at),
        refocus=RefocusConfig(every_calls=settings.refocus_every),
        budgets=BudgetConfig(
            per_conversation_tokens=settings.conversation_token_budget,
            per_user_daily_tokens=settings.user_daily_token_budget,
        ),
    )


def scheduler_config(settings: Settings) -> SchedulerConfig:
    return SchedulerConfig(
        cleanup=CleanupConfig(
            ttl=timedelta(hours=settings.file_ttl_hours),
            size_cap_bytes=int(settings.data_size_cap_gb * 1024**3),
        ),
        idle_after=timedelta(minutes=settings.idle_after_minutes),
    )


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    store: ThreadStore
    inbox: Inbox
    ledger: OutboundLedger
    agent: AgentLoop | None
    scheduler: Scheduler
    responders: dict[str, Responder] = field(default_factory=dict)
    dispatcher: Dispatcher | None = None
    _checkpointer: asyncio.Task[None] | None = None

    @classmethod
    def build(cls, settings: Settings) -> Runtime:
        """Create engine, stores and agent (no I/O yet)."""
        engine = create_engine(settings.effective_database_url)
        sessions = session_factory(engine)
        store = ThreadStore(sessions)
        inbox = Inbox(engine)
        responders: dict[str, Responder] = {}  # shared with the scheduler; adapters fill it
        schedules = ScheduleStore(sessions)
        scheduler = Scheduler(
            engine, inbox, schedules, responders, settings.data_dir.resolve(), scheduler_config(settings)
        )
        tools = schedule_tools(schedules, settings.schedule_admins, on_change=scheduler.refresh)
        agent = (
            build_agent(agent_config(settings), store, sessions, extra_tools=tools)
            if settings.model_configured
            else None
        )
        return cls(
            settings, engine, sessions, store, inbox, OutboundLedger(engine), agent, scheduler, responders
        )

    def tool_context(self, msg: InboundMessage, thread_id: str) -> ToolContext:
        return ToolContext(
            thread_id=thread_id,
            data_dir=Path(self.settings.data_dir).resolve(),
            channel=msg.channel,
            user=msg.user,
            is_dm=msg.is_dm,
            extras=conversation_extras(msg),
        )

    def start_dispatcher(self) -> None:
        self._checkpointer = asyncio.create_task(sqlite_checkpointer(self.engine))
        self.dispatcher = Dispatcher(
            inbox=self.inbox,
            ledger=self.ledger,
            store=self.store,
            agent=self.agent,
            responders=self.responders,
            tool_context=self.tool_context,
            concurrency=self.settings.max_concurrent_turns,
            lease_seconds=self.settings.lease_seconds,
            poll_interval_s=self.settings.poll_interval_s,
            upload_limits=UploadLimits(max_bytes=self.settings.max_upload_mb * 1024**2),
        )
        self.dispatcher.start()

    def start_answering(self) -> None:
        """Answer the inbox in this process: the dispatcher and the scheduler's jobs."""
        self.start_dispatcher()
        self.scheduler.start()

    async def close(self) -> None:
        await self.scheduler.stop()  # first: no new runs while the dispatcher winds down
        if self.dispatcher is not None:
            await self.dispatcher.stop()
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
        for responder in self.responders.values():
            close = getattr(responder, "close", None)
            if close is not None:
                await close()
        self.inbox.close()
        await self.engine.dispose()
