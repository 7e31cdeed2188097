"""Tables of the metric monitors: the monitors made in chats, each monitor's state between
runs, and the alerts posted (`agent_core.monitors.store` reads and writes them)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class MonitorRow(SQLModel, table=True):
    """A monitor created in a conversation (`agent_core.monitors.model.Monitor` as JSON)."""

    __tablename__ = "metric_monitors"

    name: str = Field(primary_key=True, max_length=64)
    platform: str = Field(max_length=32)
    workspace: str = Field(max_length=128)
    spec: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class MonitorStateRow(SQLModel, table=True):
    """What a monitor (from a chat or the operators' file) remembers between runs."""

    __tablename__ = "monitor_states"

    name: str = Field(primary_key=True, max_length=64)
    anomalous: bool = False
    last_period: str | None = Field(default=None, max_length=10)
    last_run_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    alert_id: str | None = Field(default=None, max_length=32)
    muted_until: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    muted_by: str | None = Field(default=None, max_length=128)


class MonitorAlertRow(SQLModel, table=True):
    """An alert posted at an onset (`agent_core.monitors.model.AlertView` as JSON)."""

    __tablename__ = "monitor_alerts"

    id: str = Field(primary_key=True, max_length=32)
    monitor: str = Field(index=True, max_length=64)
    view: str = Field(sa_column=Column(Text, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
