"""The outbound ledger: each answer is recorded before it is posted and marked once posted.

A delivery found in state `sending` was interrupted (crash, platform error) somewhere between
the two records; the adapter is then asked to check the platform before posting again.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from agent_core.messages import OutboundReply, utcnow
from gateway.tables import DeliveryStatus, OutboundDeliveryRow


class PendingDelivery:
    """A recorded answer that still has to reach the platform."""

    def __init__(self, delivery_id: str, reply: OutboundReply, resumed: bool) -> None:
        self.delivery_id = delivery_id
        self.reply = reply
        self.resumed = resumed  # an earlier attempt may have posted part of it


class OutboundLedger:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    async def begin(
        self, delivery_id: str, event_row_id: int, platform: str, reply: OutboundReply
    ) -> PendingDelivery | None:
        """Record the answer (first call wins) and count the attempt; None when it was already sent.

        One upsert, so the write is a single statement (see `agent_core.store.db.insert_rows`)."""
        record = self._insert(OutboundDeliveryRow).values(
            id=delivery_id,
            event_row_id=event_row_id,
            platform=platform,
            reply=reply.model_dump_json(),
            status=DeliveryStatus.SENDING.value,
            attempts=1,
            created_at=utcnow(),
        )
        stmt = record.on_conflict_do_update(
            index_elements=["id"],
            set_={"attempts": col(OutboundDeliveryRow.attempts) + 1},
            where=col(OutboundDeliveryRow.status) != DeliveryStatus.SENT.value,
        ).returning(col(OutboundDeliveryRow.attempts), col(OutboundDeliveryRow.reply))
        async with self._engine.begin() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return PendingDelivery(
            delivery_id, OutboundReply.model_validate_json(row.reply), resumed=row.attempts > 1
        )

    async def mark_sent(self, delivery_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                update(OutboundDeliveryRow)
                .where(col(OutboundDeliveryRow.id) == delivery_id)
                .values(status=DeliveryStatus.SENT.value, sent_at=utcnow())
            )
