"""Reading the call records back: per model and per tool call counts, durations, success and
tokens, for `ba-agent stats` and `GET /metrics` (the writing side is `agent_core.telemetry`)."""

from __future__ import annotations

from typing import Any, cast

from pydantic import BaseModel
from sqlalchemy import Integer, case, func
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from agent_core.store.tables import CallRecordRow


class CallStats(BaseModel):
    kind: str
    name: str
    calls: int
    failures: int
    avg_duration_ms: float
    success_rate: float
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


async def call_stats(
    sessions: async_sessionmaker[AsyncSession], thread_id: str | None = None
) -> list[CallStats]:
    """Per model and per tool: call count, failed calls, average duration, success rate, tokens."""
    row = CallRecordRow
    # sqlmodel's select() is typed for at most four columns; for more it returns this `Select`,
    # whose constructor cannot infer the row type: it is stated here. The sums are NULL over no
    # rows; AVG is a float or a Decimal, depending on the backend.
    stmt = cast(
        "Select[str, str, int, int | None, Any, Any, int | None, int | None, int | None, int | None]",
        Select(
            col(row.kind),
            col(row.name),
            func.count(),
            func.sum(case((col(row.success), 0), else_=1).cast(Integer)),
            func.avg(row.duration_ms),
            func.avg(case((col(row.success), 1), else_=0).cast(Integer)),
            func.sum(row.input_tokens),
            func.sum(row.output_tokens),
            func.sum(row.cache_read_tokens),
            func.sum(row.cache_write_tokens),
        ),
    ).group_by(col(row.kind), col(row.name)).order_by(col(row.kind), col(row.name))
    if thread_id is not None:
        stmt = stmt.where(row.thread_id == thread_id)
    async with sessions() as session:
        rows = (await session.exec(stmt)).all()
    return [
        CallStats(
            kind=kind,
            name=name,
            calls=calls,
            failures=int(failed or 0),
            avg_duration_ms=float(avg or 0),
            success_rate=float(ok or 0),
            input_tokens=int(tin or 0),
            output_tokens=int(tout or 0),
            cache_read_tokens=int(cr or 0),
            cache_write_tokens=int(cw or 0),
        )
        for kind, name, calls, failed, avg, ok, tin, tout, cr, cw in rows
    ]
