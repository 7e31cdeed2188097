"""Examples learned from feedback: a 👍 on an answer whose numbers came from SQL on a data source
proposes its question and SQL as a verified example; a person confirms or rejects it (a data
owner named in the access policy, or an operator with `ba-agent examples review`). Only
confirmed ones are searched, beside the `BA_EXAMPLES_FILE` entries and under the same rules.
Nothing is learned without a person confirming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel
from sqlalchemy import Column, Text, UniqueConstraint, func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import Field, SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.examples import VerifiedExample
from agent_core.messages import utcnow
from agent_core.store.types import utc_column


class ProposalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class ExampleProposalRow(SQLModel, table=True):
    """A question and the SQL that answered it, proposed by a 👍 (migration ``0010``)."""

    __tablename__ = "example_proposals"
    __table_args__ = (UniqueConstraint("answer_id", "sql_hash"),)

    id: int | None = Field(default=None, primary_key=True)
    answer_id: str = Field(index=True, max_length=64)
    sql_hash: str = Field(max_length=64)
    question: str = Field(sa_column=Column(Text, nullable=False))
    sql: str = Field(sa_column=Column(Text, nullable=False))
    source: str = Field(index=True, max_length=128)
    proposed_by: str = Field(max_length=160)  # platform:user
    status: str = Field(default=ProposalStatus.PENDING, index=True, max_length=16)
    decided_by: str | None = Field(default=None, max_length=160)
    created_at: datetime = Field(default_factory=utcnow, sa_column=utc_column())
    decided_at: datetime | None = Field(default=None, sa_column=utc_column(nullable=True))


class Proposal(BaseModel):
    id: int
    answer_id: str
    question: str
    sql: str
    source: str
    proposed_by: str
    status: ProposalStatus
    decided_by: str | None = None
    created_at: datetime


def _proposal(row: ExampleProposalRow) -> Proposal:
    assert row.id is not None
    return Proposal(
        id=row.id,
        answer_id=row.answer_id,
        question=row.question,
        sql=row.sql,
        source=row.source,
        proposed_by=row.proposed_by,
        status=ProposalStatus(row.status),
        decided_by=row.decided_by,
        created_at=row.created_at,
    )


class LearnedExamples:
    """Proposals and the confirmed examples, in the service database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def propose(self, answer_id: str, question: str, sql: str, source: str, proposed_by: str) -> Proposal | None:
        """Store the proposal; None when this answer's SQL was proposed before (one per answer
        and query, however many 👍 it gets)."""
        digest = hashlib.sha256(sql.strip().encode()).hexdigest()
        async with self._sessions() as session:
            conn = await session.connection()
            dialect = conn.dialect.name
            insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
            stmt = (
                insert(ExampleProposalRow)
                .values(
                    answer_id=answer_id,
                    sql_hash=digest,
                    question=question.strip(),
                    sql=sql.strip(),
                    source=source,
                    proposed_by=proposed_by,
                    status=ProposalStatus.PENDING.value,
                    created_at=utcnow(),
                )
                .on_conflict_do_nothing()
                .returning(col(ExampleProposalRow.id))
            )
            new_id = (await conn.execute(stmt)).scalar()
            await session.commit()
        return await self.get(new_id) if new_id is not None else None

    async def get(self, proposal_id: int) -> Proposal | None:
        async with self._sessions() as session:
            row = await session.get(ExampleProposalRow, proposal_id)
            return _proposal(row) if row is not None else None

    async def decide(self, proposal_id: int, approve: bool, who: str) -> Proposal | None:
        """Approve or reject a pending proposal (the first decision counts); the proposal as it
        now stands, None if unknown."""
        status = ProposalStatus.APPROVED if approve else ProposalStatus.REJECTED
        async with self._sessions() as session:
            await (await session.connection()).execute(
                update(ExampleProposalRow)
                .where(
                    col(ExampleProposalRow.id) == proposal_id,
                    col(ExampleProposalRow.status) == ProposalStatus.PENDING.value,
                )
                .values(status=status.value, decided_by=who, decided_at=utcnow())
            )
            await session.commit()
        return await self.get(proposal_id)

    async def listed(self, statuses: Iterable[ProposalStatus] = tuple(ProposalStatus)) -> list[Proposal]:
        wanted = [s.value for s in statuses]
        async with self._sessions() as session:
            rows = await session.exec(
                select(ExampleProposalRow)
                .where(col(ExampleProposalRow.status).in_(wanted))
                .order_by(col(ExampleProposalRow.id))
            )
            return [_proposal(row) for row in rows]

    async def version(self) -> tuple[int, datetime | None]:
        """Changes whenever an example is confirmed (for the search index to rebuild)."""
        async with self._sessions() as session:
            result = await session.exec(
                select(func.count(), func.max(col(ExampleProposalRow.decided_at))).where(
                    col(ExampleProposalRow.status) == ProposalStatus.APPROVED.value
                )
            )
            count, latest = result.one()
            return int(count), latest

    async def approved(self) -> list[VerifiedExample]:
        return [
            VerifiedExample(question=p.question, sql=p.sql, source=p.source)
            for p in await self.listed([ProposalStatus.APPROVED])
        ]
