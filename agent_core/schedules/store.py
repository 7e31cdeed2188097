"""The scheduled reports in the database: the storage of the scheduling tools and the scheduler."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.schedules.model import NewSchedule, Schedule
from agent_core.schedules.tables import ReportScheduleRow


class ScheduleStore:
    """Report schedules in the database."""

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
        await self._update(schedule_id, enabled=False, disabled_reason=reason)

    async def record_fire(self, schedule_id: int, fire_time: datetime, next_run_at: datetime | None) -> None:
        await self._update(schedule_id, last_run_at=fire_time, next_run_at=next_run_at)

    async def _update(self, schedule_id: int, **values: object) -> None:
        async with self._sessions() as session:
            await session.exec(update(ReportScheduleRow).where(col(ReportScheduleRow.id) == schedule_id).values(**values))
            await session.commit()
