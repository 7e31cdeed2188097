"""Scheduled reports in the gateway: their table, and the messages a run sends.

A schedule is a row of ``report_schedules`` (the record and its cron reading are agent_core's:
`agent_core.tools.schedule_model`). :class:`ScheduleStore` keeps them and is the storage the
scheduling tools (`agent_core.tools.schedule_tools`) work through. The `Scheduler`
(gateway/jobs/scheduler.py) turns each enabled row into a job; at fire time the prompt enters the
durable inbox like a user message (:func:`report_message`), into a fresh conversation, and the
dispatcher answers it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.i18n import language_of_text
from agent_core.messages import InboundMessage, ThreadKey
from agent_core.tools.schedule_model import NewSchedule, Schedule
from gateway.tables import ReportScheduleRow


class ScheduleStore:
    """Report schedules in the database (the tools' `ScheduleStorage`)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def create(self, schedule: NewSchedule) -> Schedule:
        row = ReportScheduleRow(**schedule.model_dump())
        async with self._sessions() as session:
            session.add(row)
            await session.commit()
            await session.refresh(row)
        return Schedule.model_validate(row)

    async def get(self, schedule_id: int) -> Schedule | None:
        async with self._sessions() as session:
            row = await session.get(ReportScheduleRow, schedule_id)
        return None if row is None else Schedule.model_validate(row)

    async def enabled(self) -> list[Schedule]:
        """Every schedule that should run."""
        async with self._sessions() as session:
            rows = await session.exec(
                select(ReportScheduleRow).where(ReportScheduleRow.enabled).order_by(col(ReportScheduleRow.id))
            )
            return [Schedule.model_validate(row) for row in rows.all()]

    async def in_workspace(
        self, platform: str, workspace: str, creator: str | None, *, include_disabled: bool
    ) -> list[Schedule]:
        """Schedules of one chat workspace, of one creator unless ``creator`` is None."""
        stmt = select(ReportScheduleRow).where(
            ReportScheduleRow.platform == platform, ReportScheduleRow.workspace == workspace
        )
        if creator is not None:
            stmt = stmt.where(ReportScheduleRow.creator == creator)
        if not include_disabled:
            stmt = stmt.where(ReportScheduleRow.enabled)
        async with self._sessions() as session:
            rows = await session.exec(stmt.order_by(col(ReportScheduleRow.id)))
            return [Schedule.model_validate(row) for row in rows.all()]

    async def count_enabled(self, platform: str, workspace: str, creator: str) -> int:
        stmt = select(func.count()).where(
            ReportScheduleRow.platform == platform,
            ReportScheduleRow.workspace == workspace,
            ReportScheduleRow.creator == creator,
            ReportScheduleRow.enabled,
        )
        async with self._sessions() as session:
            return (await session.exec(stmt)).one()

    async def disable(self, schedule_id: int, reason: str) -> None:
        async with self._sessions() as session:
            await session.exec(
                update(ReportScheduleRow)
                .where(col(ReportScheduleRow.id) == schedule_id)
                .values(enabled=False, disabled_reason=reason)
            )
            await session.commit()

    async def record_fire(self, schedule_id: int, fire_time: datetime, next_run_at: datetime | None) -> None:
        async with self._sessions() as session:
            await session.exec(
                update(ReportScheduleRow)
                .where(col(ReportScheduleRow.id) == schedule_id)
                .values(last_run_at=fire_time, next_run_at=next_run_at)
            )
            await session.commit()


# --- the messages a schedule sends -------------------------------------------------------------


def fire_stamp(fire_time: datetime) -> str:
    """A compact ISO 8601 UTC stamp of a fire time, safe inside ids and thread keys."""
    return fire_time.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def report_message(row: Schedule, fire_time: datetime) -> InboundMessage:
    """The inbound message of one run: a fresh conversation at the schedule's target.

    The ids derive from (schedule, fire time) alone, so firing twice is deduplicated by the
    inbox; with ``reply_in_thread`` None the answer is a top-level post (or DM message). It is
    marked as the schedule's run: the access policy then limits it to what both its creator
    and its target may see.
    """
    stamp = fire_stamp(fire_time)
    root = f"schedule-{row.id}-{stamp}"
    text = (
        f"[Scheduled report #{row.id} ({row.cron}, {row.tz}). It runs automatically: nobody "
        "can answer questions now, so state your assumptions and deliver the result.]\n\n"
        f"{row.prompt}"
    )
    return InboundMessage(
        platform=row.platform,
        event_id=report_event_id(row.id, fire_time),
        message_id=root,
        workspace=row.workspace,
        channel=row.channel,
        thread=ThreadKey(platform=row.platform, workspace=row.workspace, channel=row.channel, root=root),
        reply_in_thread=row.thread_root,
        user=row.creator,
        user_name=row.creator_name,
        # No platform locale is stored with a schedule: the language of its prompt (not of the
        # English preamble above) stands for its creator's.
        locale=language_of_text(row.prompt).value,
        text=text,
        is_dm=row.is_dm,
        received_at=fire_time,
        scheduled_run=f"report:{row.id}",
    )


def report_event_id(schedule_id: int | None, fire_time: datetime) -> str:
    """The platform-level event id of a run (the inbox stores it as ``<platform>:<id>``)."""
    return f"schedule:{schedule_id}:{fire_stamp(fire_time)}"


def notice_message(row: Schedule, now: datetime, creator_dm: str | None) -> InboundMessage:
    """An address for a notice to the schedule's creator: their DM (`creator_dm`, where the
    platform can address one by user) or the schedule's own DM, else the schedule's target."""
    dm = row.channel if row.is_dm else creator_dm
    channel = dm or row.channel
    root = f"schedule-{row.id}-notice-{fire_stamp(now)}"
    return InboundMessage(
        platform=row.platform,
        event_id=f"schedule-notice:{row.id}:{fire_stamp(now)}",
        message_id=root,
        workspace=row.workspace,
        channel=channel,
        thread=ThreadKey(platform=row.platform, workspace=row.workspace, channel=channel, root=root),
        reply_in_thread=None if dm else row.thread_root,
        user=row.creator,
        user_name=row.creator_name,
        text="",
        is_dm=dm is not None,
        received_at=now,
    )
