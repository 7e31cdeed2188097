"""Tables of the agent core: conversations (threads) and their messages."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from agent_core.messages import new_id, utcnow
from agent_core.store.types import utc_column


class ThreadRow(SQLModel, table=True):
    """A conversation. At most one live (not archived) conversation per thread key."""

    __tablename__ = "threads"
    __table_args__ = (
        Index(
            "uq_threads_live_key",
            "key",
            unique=True,
            sqlite_where=text("archived_at IS NULL"),
            postgresql_where=text("archived_at IS NULL"),
        ),
    )

    id: str = Field(default_factory=new_id, primary_key=True, max_length=64)
    key: str = Field(index=True, max_length=512)
    platform: str = Field(max_length=32)
    workspace: str = Field(max_length=128)
    channel: str = Field(max_length=128)
    root: str = Field(max_length=128)
    dm_owner: str | None = Field(default=None, max_length=128)
    state: str = Field(default="{}", sa_column=Column(Text, nullable=False, server_default="{}"))
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    archived_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))


class MessageRow(SQLModel, table=True):
    """One stored message; `content` is the JSON list of content blocks."""

    __tablename__ = "messages"
    __table_args__ = (UniqueConstraint("thread_id", "seq", name="uq_messages_thread_seq"),)

    id: str = Field(primary_key=True, max_length=64)
    thread_id: str = Field(foreign_key="threads.id", index=True, max_length=64)
    seq: int
    role: str = Field(max_length=16)
    content: str = Field(sa_column=Column(Text, nullable=False))
    schema_version: int
    event_key: str | None = Field(default=None, index=True, max_length=512)
    created_at: datetime = Field(sa_column=utc_column())


class CallRecordRow(SQLModel, table=True):
    """One model call or tool call, for metrics (`ba-agent stats`, `/metrics`)."""

    __tablename__ = "call_records"
    __table_args__ = (Index("ix_call_records_user_started", "user_id", "started_at"),)

    id: str = Field(default_factory=new_id, primary_key=True, max_length=64)
    thread_id: str = Field(index=True, max_length=64)
    user_id: str | None = Field(default=None, max_length=128)  # for per-user daily budgets
    kind: str = Field(max_length=8)  # "model" or "tool"
    name: str = Field(index=True, max_length=128)  # the tool, or the model
    started_at: datetime = Field(default_factory=utcnow, sa_column=utc_column(index=True))
    duration_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    success: bool = True
    error_type: str | None = Field(default=None, max_length=32)
    retries: int = 0
    output_level: str | None = Field(default=None, max_length=16)
