"""Tables of the gateway: the inbound event inbox, per-thread leases, the outbound ledger, and the
scheduler's per-run claims and data-file index (the report schedules themselves are
`agent_core.schedules.tables`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Column, Index, Integer, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class EventStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


# An event not answered yet, as SQL: spelled out (not bound) wherever a query is to use the
# partial index of open events, since a planner can match only a literal to its predicate.
OPEN_SQL = "status IN ('pending', 'processing')"


class InboundEventRow(SQLModel, table=True):
    """An accepted user message, committed before the platform gets its acknowledgement.

    `event_id` dedupes redeliveries of one event; `dedupe_key` dedupes one user message that
    arrives as several events (Slack's `app_mention` plus `message`, Feishu reconnect replays).
    """

    __tablename__ = "inbound_events"
    # The open events in id order, and only those: what a look for work reads (migration 0011).
    __table_args__ = (
        Index("ix_inbound_events_open", "id", sqlite_where=text(OPEN_SQL), postgresql_where=text(OPEN_SQL)),
    )

    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    platform: str = Field(max_length=32)
    event_id: str = Field(unique=True, max_length=255)
    dedupe_key: str = Field(unique=True, max_length=512)
    thread_key: str = Field(index=True, max_length=512)
    payload: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(default=EventStatus.PENDING, max_length=16)
    attempts: int = 0
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    available_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())  # retry backoff
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())


class ThreadLeaseRow(SQLModel, table=True):
    """Who may work on a thread right now. Expires so a crashed process's threads move on."""

    __tablename__ = "thread_leases"

    thread_key: str = Field(primary_key=True, max_length=512)
    owner: str = Field(max_length=64)
    expires_at: datetime = Field(sa_column=utc_column(index=True))


class DeliveryStatus(StrEnum):
    SENDING = "sending"
    SENT = "sent"


class OutboundDeliveryRow(SQLModel, table=True):
    """One answer to one inbound event. Recorded before it is posted and after it is."""

    __tablename__ = "outbound_deliveries"

    id: str = Field(primary_key=True, max_length=64)
    event_row_id: int = Field(index=True)
    platform: str = Field(max_length=32)
    reply: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(default=DeliveryStatus.SENDING, max_length=16)
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    sent_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class RunOutcome(StrEnum):
    """What became of a report run's inbound event, once known."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"  # the schedule was off at fire time: nothing was enqueued


class ScheduledRunRow(SQLModel, table=True):
    """One run of a scheduled job, claimed by inserting this row.

    The unique (job, fire time) pair makes the claim: of all gateway processes whose
    schedulers fire the same job at the same time, exactly one inserts the row and runs it.
    """

    __tablename__ = "scheduled_runs"
    __table_args__ = (UniqueConstraint("job_id", "fire_time", name="uq_scheduled_runs_job_fire"),)

    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    job_id: str = Field(max_length=128)
    fire_time: datetime = Field(sa_column=utc_column(index=True))
    schedule_id: int | None = Field(  # report runs only
        default=None, sa_column=Column(BigInteger, nullable=True, index=True)
    )
    owner: str = Field(max_length=128)  # the process that claimed it
    status: str = Field(default=RunStatus.RUNNING, max_length=16)
    error: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    started_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    finished_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
    outcome: str | None = Field(default=None, max_length=16)  # report runs, once settled
    settled_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))


class DataFileRow(SQLModel, table=True):
    """A generated workspace file (data, chart, report), indexed for the cleanup job."""

    __tablename__ = "data_files"

    path: str = Field(primary_key=True, max_length=1024)  # relative to the data dir, "/"-separated
    workspace: str = Field(index=True, max_length=255)  # the conversation's workspace directory
    thread_id: str | None = Field(default=None, max_length=64)  # when it names a known thread
    area: str = Field(max_length=16)  # data, charts or reports
    size_bytes: int = Field(sa_column=Column(BigInteger, nullable=False))
    modified_at: datetime = Field(sa_column=utc_column())
    last_access_at: datetime = Field(sa_column=utc_column(index=True))
    seen_at: datetime = Field(sa_column=utc_column())  # last scan that found it
