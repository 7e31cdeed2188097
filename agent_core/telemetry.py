"""Recording every model and tool call, and the aggregates shown by stats and /metrics."""

from __future__ import annotations

import logging

from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.hooks import Hook
from agent_core.messages import ToolUseBlock
from agent_core.model import ModelResponse, ModelUnavailable
from agent_core.run_context import RunContext
from agent_core.store.db import insert_rows
from agent_core.store.tables import CallRecordRow
from agent_core.toolkit.protocol import ToolResult

log = logging.getLogger(__name__)


class TelemetryHook(Hook):
    """Writes one row per model call and per tool call of the conversation."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        usage = response.usage
        await self._record(
            CallRecordRow(
                thread_id=ctx.thread_id,
                user_id=ctx.user or None,
                kind="model",
                name=response.model,
                duration_ms=response.duration_ms,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                retries=response.attempts - 1,
            )
        )

    async def after_model_error(self, error: ModelUnavailable, ctx: RunContext) -> None:
        await self._record(
            CallRecordRow(
                thread_id=ctx.thread_id,
                user_id=ctx.user or None,
                kind="model",
                name=error.model or "unknown",
                duration_ms=error.duration_ms,
                success=False,
                error_type=error.kind.value,
            )
        )

    async def after_tool(self, call: ToolUseBlock, result: ToolResult, ctx: RunContext) -> ToolResult:
        await self._record(
            CallRecordRow(
                thread_id=ctx.thread_id,
                user_id=ctx.user or None,
                kind="tool",
                name=call.name,
                duration_ms=result.duration_ms,
                success=not result.is_error,
                error_type=result.error_type.value if result.error_type else None,
                retries=result.retries,
                output_level=str(result.output_level) if result.output_level else None,
            )
        )
        return result

    async def _record(self, row: CallRecordRow) -> None:
        try:
            async with self._sessions() as session:
                await insert_rows(session, row)
                await session.commit()
        except Exception:  # metrics must never break a conversation
            log.exception("could not record a %s call", row.kind)
