"""Tables of the gateway: the inbound event inbox, per-thread leases, the outbound ledger."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Column, Integer, Text
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column



class EventStatus(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    DONE = "done"
    FAILED = "failed"


class InboundEventRow(SQLModel, table=True):
    """An accepted user message, committed before the platform gets its acknowledgement.

    `event_id` dedupes redeliveries of one event; `dedupe_key` dedupes one user message that
    arrives as several events (Slack's `app_mention` plus `message`, Feishu reconnect replays).
    """

    __tablename__ = "inbound_events"

    id: int | None = Field(
        default=None,
        sa_column=Column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    )
    platform: str = Field(max_length=32)
    event_id: str = Field(unique=True, max_length=255)
    dedupe_key: str = Field(unique=True, max_length=512)
    thread_key: str = Field(index=True, max_length=512)
    payload: str = Field(sa_column=Column(Text, nullable=False))
    status: str = Field(default=EventStatus.PENDING, index=True, max_length=16)
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
