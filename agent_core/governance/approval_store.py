"""Approvals in the database: opened when a turn pauses, settled once, read by any replica.

Settling is one conditional UPDATE (``WHERE status = 'pending'``): of two decisions racing —
a double click, a click and the expiry sweep, two replicas — exactly one changes the row, and
everyone afterwards reads the same outcome.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.governance.approval import ApprovalStatus, ApprovalView
from agent_core.governance.approval_table import ApprovalRow
from agent_core.messages import ApprovalChoice, ApprovalClick, InboundMessage, utcnow
from agent_core.state import ApprovalRequest


class StoredApproval(ApprovalView):
    """An approval with what only the gateway needs: where it was asked, and until when."""

    thread_id: str
    origin: InboundMessage
    expires_at: datetime

    def click(
        self, choice: ApprovalChoice, *, event_id: str, user: str, user_name: str | None = None
    ) -> InboundMessage:
        """The inbox event of a decision: in the asking thread, keyed by the approval
        (``message_id``), so the first decision is accepted and any later one is a duplicate."""
        return self.origin.model_copy(
            update={
                "event_id": event_id,
                "message_id": f"approval:{self.id}",
                "user": user,
                "user_name": user_name,
                "text": "",
                "attachments": [],
                "received_at": utcnow(),
                "approval": ApprovalClick(approval_id=self.id, choice=choice),
            }
        )


def approval_id(thread_id: str, tool_use_id: str) -> str:
    """The same id for the same paused call, so a retried pause finds its row."""
    return hashlib.sha256(f"{thread_id}\0{tool_use_id}".encode()).hexdigest()[:24]


class ApprovalStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def open(
        self, thread_id: str, origin: InboundMessage, request: ApprovalRequest, ttl: timedelta
    ) -> tuple[StoredApproval, bool]:
        """The approval of ``request``, created unless this paused call has one already, and
        whether this call created it."""
        key = approval_id(thread_id, request.tool_use_id)
        existing = await self.get(key)
        if existing is not None:
            return existing, False
        now = utcnow()
        row = ApprovalRow(
            id=key,
            thread_id=thread_id,
            tool_use_id=request.tool_use_id,
            platform=origin.platform,
            asker=origin.user,
            origin=origin.model_dump_json(),
            request=request.model_dump_json(),
            status=ApprovalStatus.PENDING.value,
            created_at=now,
            expires_at=now + ttl,
        )
        created = True
        async with self._sessions() as session:
            session.add(row)
            try:
                await session.commit()
            except IntegrityError:  # another worker opened it first: read theirs
                await session.rollback()
                created = False
        stored = await self.get(key)
        assert stored is not None
        return stored, created

    async def get(self, key: str) -> StoredApproval | None:
        async with self._sessions() as session:
            row = await session.get(ApprovalRow, key)
        return _stored(row) if row is not None else None

    async def set_message_ref(self, key: str, ref: str) -> None:
        await self._update(key, message_ref=ref)

    async def settle(self, key: str, status: ApprovalStatus, by: str | None) -> StoredApproval | None:
        """Decide a pending approval; the row as it stands afterwards (decided by whoever came
        first), or None for an unknown id."""
        async with self._sessions() as session:
            await session.exec(
                update(ApprovalRow)
                .where(col(ApprovalRow.id) == key, col(ApprovalRow.status) == ApprovalStatus.PENDING.value)
                .values(status=status.value, decided_by=by, decided_at=utcnow())
            )
            await session.commit()
        return await self.get(key)

    async def pending_in(self, thread_id: str) -> list[StoredApproval]:
        return await self._select(
            col(ApprovalRow.thread_id) == thread_id, col(ApprovalRow.status) == ApprovalStatus.PENDING.value
        )

    async def settled_in(self, thread_id: str) -> list[StoredApproval]:
        return await self._select(
            col(ApprovalRow.thread_id) == thread_id, col(ApprovalRow.status) != ApprovalStatus.PENDING.value
        )

    async def expired_pending(self, limit: int = 50) -> list[StoredApproval]:
        found = await self._select(
            col(ApprovalRow.status) == ApprovalStatus.PENDING.value, col(ApprovalRow.expires_at) <= utcnow()
        )
        return found[:limit]

    async def _select(self, *conditions: object) -> list[StoredApproval]:
        async with self._sessions() as session:
            rows = (await session.exec(select(ApprovalRow).where(*conditions))).all()  # type: ignore[arg-type]
        return [_stored(row) for row in rows]

    async def _update(self, key: str, **values: object) -> None:
        async with self._sessions() as session:
            await session.exec(update(ApprovalRow).where(col(ApprovalRow.id) == key).values(**values))
            await session.commit()


def _stored(row: ApprovalRow) -> StoredApproval:
    return StoredApproval(
        id=row.id,
        request=ApprovalRequest.model_validate_json(row.request),
        asker=row.asker,
        status=ApprovalStatus(row.status),
        decided_by=row.decided_by,
        message_ref=row.message_ref,
        thread_id=row.thread_id,
        origin=InboundMessage.model_validate_json(row.origin),
        expires_at=row.expires_at,
    )
