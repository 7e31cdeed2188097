"""The table of the scheduled reports (`agent_core.schedules.store` reads and writes it)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Column, Integer, Text
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class ReportScheduleRow(SQLModel, table=True):
    """A recurring report: a prompt run by the agent on a cron schedule, posted to a target.

    The target is where the conversation asked for it: a channel (a new top-level post each
    run), a thread (a reply in it) or a DM. Every run starts a fresh conversation.
    """

    __tablename__ = "report_schedules"

    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    creator: str = Field(index=True, max_length=128)  # platform user id
    creator_name: str | None = Field(default=None, max_length=255)
    platform: str = Field(max_length=32)
    workspace: str = Field(max_length=128)
    channel: str = Field(max_length=128)  # the DM channel (or the user id on Slack) for DMs
    thread_root: str | None = Field(default=None, max_length=128)  # None: a top-level post
    is_dm: bool = False
    cron: str = Field(max_length=120)  # five fields: minute hour day month day-of-week
    tz: str = Field(max_length=64)  # IANA name the cron fields are read in
    prompt: str = Field(sa_column=Column(Text, nullable=False))
    enabled: bool = Field(default=True, index=True)
    disabled_reason: str | None = Field(default=None, max_length=255)
    consecutive_failures: int = 0
    last_run_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    next_run_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
