"""The table of answer feedback: each person's 👍/👎 on each answer, with the optional "what was
wrong?" (`gateway.service.feedback` reads and writes it)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Column, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class AnswerFeedbackRow(SQLModel, table=True):
    """One person's rating of one answer: a click toggles it, the latest counts."""

    __tablename__ = "answer_feedback"
    __table_args__ = (UniqueConstraint("answer_id", "platform", "user"),)

    id: int | None = Field(default=None, primary_key=True)
    answer_id: str = Field(index=True, max_length=64)  # the answer's delivery id
    platform: str = Field(max_length=32)
    workspace: str = Field(max_length=128)
    channel: str = Field(max_length=128)
    thread_key: str = Field(index=True, max_length=512)
    user: str = Field(max_length=128)
    rating: int  # 1 helpful, -1 not helpful, 0 withdrawn
    comment: str | None = Field(default=None, sa_column=Column(Text, nullable=True))  # "what was wrong?"
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    updated_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
