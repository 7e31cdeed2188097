"""Monitors, their state and their alerts in the database.

:class:`MonitorStore` keeps the monitors made in conversations (through the monitor tools,
`agent_core.tools.monitor_tools`) beside the operators' file monitors, which it holds in
memory: one name space for both. It also keeps each monitor's state between runs and
the alerts, which a click on an alert's buttons changes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.monitors.model import (
    AlertClick,
    AlertStatus,
    AlertView,
    Monitor,
    MonitorAction,
    MonitorExists,
    MonitorState,
)
from agent_core.monitors.tables import MonitorAlertRow, MonitorRow, MonitorStateRow

MUTE_FOR = timedelta(days=7)


class MonitorStore:
    """Chat monitors in the database and the operators' file monitors, by name."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], file_monitors: Iterable[Monitor] = ()) -> None:
        self._sessions = sessions
        self._file = {monitor.name: monitor for monitor in file_monitors}

    # --- monitors -----------------------------------------------------------------------------

    async def create(self, monitor: Monitor) -> Monitor:
        if monitor.name in self._file:
            raise MonitorExists(monitor.name)
        row = MonitorRow(
            name=monitor.name, platform=monitor.platform, workspace=monitor.workspace, spec=monitor.model_dump_json()
        )
        try:
            async with self._sessions() as session:
                session.add(row)
                await session.commit()
        except IntegrityError:
            raise MonitorExists(monitor.name) from None
        return monitor

    async def get(self, name: str) -> Monitor | None:
        if name in self._file:
            return self._file[name]
        async with self._sessions() as session:
            row = await session.get(MonitorRow, name)
        return None if row is None else Monitor.model_validate_json(row.spec)

    async def all(self) -> list[Monitor]:
        """Every monitor to run: the file's, then those made in chats, by name."""
        async with self._sessions() as session:
            rows = (await session.exec(select(MonitorRow).order_by(col(MonitorRow.name)))).all()
        return [*self._file.values(), *(Monitor.model_validate_json(row.spec) for row in rows)]

    async def in_workspace(self, platform: str, workspace: str) -> list[Monitor]:
        return [m for m in await self.all() if (m.platform, m.workspace) == (platform, workspace)]

    async def delete(self, name: str) -> None:
        async with self._sessions() as session:
            await session.exec(delete(MonitorRow).where(col(MonitorRow.name) == name))
            await session.exec(delete(MonitorStateRow).where(col(MonitorStateRow.name) == name))
            await session.commit()

    # --- state between runs -------------------------------------------------------------------

    async def state(self, name: str) -> MonitorState:
        async with self._sessions() as session:
            row = await session.get(MonitorStateRow, name)
        return MonitorState(name=name) if row is None else MonitorState.model_validate(row)

    async def save_run(self, state: MonitorState) -> None:
        """Store what a run found; the mute is the buttons' to change, not the run's."""
        async with self._sessions() as session:
            row = await session.get(MonitorStateRow, state.name) or MonitorStateRow(name=state.name)
            row.anomalous, row.last_period = state.anomalous, state.last_period
            row.last_run_at, row.alert_id = state.last_run_at, state.alert_id
            session.add(row)
            await session.commit()

    # --- alerts -------------------------------------------------------------------------------

    async def save_alert(self, view: AlertView) -> None:
        async with self._sessions() as session:
            await session.merge(MonitorAlertRow(id=view.id, monitor=view.monitor, view=view.model_dump_json()))
            await session.commit()

    async def alert(self, alert_id: str) -> AlertView | None:
        async with self._sessions() as session:
            row = await session.get(MonitorAlertRow, alert_id)
        return None if row is None else AlertView.model_validate_json(row.view)

    async def act(self, alert_id: str, action: MonitorAction, user: str, now: datetime) -> AlertClick | None:
        """Record a click on an alert's buttons, committed before the platform is answered;
        the alert as it now reads (None: unknown). A second click changes nothing, and says so."""
        async with self._sessions() as session:
            row = await session.get(MonitorAlertRow, alert_id, with_for_update=True)
            if row is None:
                return None
            view = AlertView.model_validate_json(row.view)
            if view.status is not AlertStatus.OPEN:
                return AlertClick(view, changed=False)
            if action is MonitorAction.MUTE:
                view.status, view.muted_until = AlertStatus.MUTED, now + MUTE_FOR
                state = await session.get(MonitorStateRow, view.monitor) or MonitorStateRow(name=view.monitor)
                state.muted_until, state.muted_by = view.muted_until, user
                session.add(state)
            else:
                view.status = AlertStatus.ACKNOWLEDGED
            view.acted_by = user
            row.view = view.model_dump_json()
            session.add(row)
            await session.commit()
        return AlertClick(view, changed=True)
