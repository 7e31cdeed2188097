"""The pending and decided approvals in the service database (migration ``0005`` creates it).

One row per paused tool call: unique (thread, call), so a retried pause never asks twice. The
row is the durable half of the pause (the thread's state holds the other): it survives a
restart, says who may decide, and its conditional status change makes a decision count once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class ApprovalRow(SQLModel, table=True):
    __tablename__ = "approvals"
    __table_args__ = (UniqueConstraint("thread_id", "tool_use_id", name="uq_approvals_thread_call"),)

    id: str = Field(primary_key=True, max_length=32)
    thread_id: str = Field(index=True, max_length=64)
    tool_use_id: str = Field(max_length=128)
    platform: str = Field(max_length=32)
    asker: str = Field(max_length=128)
    origin: str = Field(sa_column=Column(Text, nullable=False))  # the asking InboundMessage (JSON)
    request: str = Field(sa_column=Column(Text, nullable=False))  # the ApprovalRequest (JSON)
    status: str = Field(default="pending", index=True, max_length=16)
    decided_by: str | None = Field(default=None, max_length=128)
    message_ref: str | None = Field(default=None, max_length=255)  # the posted request's id
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    expires_at: datetime = Field(sa_column=utc_column(index=True))
    decided_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))
