"""The thread store: conversations and their ordered messages, with an incremental cache.

A thread is worked on by one process at a time (the gateway holds a per-thread lease), so a
process can keep the history it has read and fetch only rows newer than the last one it saw.
That keeps a turn's cost proportional to new content, not to the length of the conversation.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import bindparam, func, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.messages import (
    SCHEMA_VERSION,
    ContentBlock,
    Role,
    StandardMessage,
    ThreadKey,
    utcnow,
)
from agent_core.request import append_api_message
from agent_core.state import ThreadState
from agent_core.store.db import insert_rows, table_of
from agent_core.store.schema import upgrade_blocks
from agent_core.store.tables import MessageRow, ThreadRow

_BLOCKS = TypeAdapter(list[ContentBlock])
_THREADS = table_of(ThreadRow)
# Core, not ORM: compiled once (see `insert_rows` for why writes stay lean).
_TOUCH_THREAD = (
    update(_THREADS).where(_THREADS.c.id == bindparam("thread_id")).values(updated_at=bindparam("now"))
)


def message_from_row(row: MessageRow) -> StandardMessage:
    """Rebuild a stored message, upgrading rows written by older schema versions."""
    raw = upgrade_blocks(json.loads(row.content), row.schema_version)
    return StandardMessage(
        schema_version=SCHEMA_VERSION,
        id=row.id,
        thread_id=row.thread_id,
        role=Role(row.role),
        content=_BLOCKS.validate_python(raw),
        created_at=row.created_at,
    )


@dataclass
class _CachedHistory:
    messages: list[StandardMessage] = field(default_factory=list)
    api: list[dict[str, Any]] = field(default_factory=list)  # the same, in API shape
    event_keys: set[str] = field(default_factory=set)
    last_seq: int = 0
    # Checked against the database since the turn began: while this process holds the thread,
    # nobody else appends, so one check per turn is enough.
    verified: bool = False


class ThreadStore:
    """Conversations keyed by `ThreadKey`; messages appended in order, never rewritten."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], cache_size: int = 512) -> None:
        self._sessions = sessions
        self._cache: OrderedDict[str, _CachedHistory] = OrderedDict()
        self._cache_size = cache_size

    async def open(self, key: ThreadKey, dm_owner: str | None = None) -> str:
        """The id of the live conversation for `key`, creating it if there is none."""
        async with self._sessions() as session:
            existing = await self._live_thread_id(session, key)
            if existing:
                return existing
            row = ThreadRow(
                key=str(key),
                platform=key.platform,
                workspace=key.workspace,
                channel=key.channel,
                root=key.root,
                dm_owner=dm_owner,
            )
            try:
                await insert_rows(session, row)
                await session.commit()
            except IntegrityError:  # another process created it first
                await session.rollback()
                existing = await self._live_thread_id(session, key)
                if existing is None:
                    raise
                return existing
            return row.id

    async def is_live(self, key: ThreadKey) -> bool:
        """Whether a live conversation exists for `key` (the bot is part of that thread)."""
        async with self._sessions() as session:
            return await self._live_thread_id(session, key) is not None

    async def reset(self, key: ThreadKey) -> None:
        """Archive the live conversation for `key`: the next message starts a fresh one."""
        async with self._sessions() as session:
            await session.exec(
                update(ThreadRow)
                .where(col(ThreadRow.key) == str(key), col(ThreadRow.archived_at).is_(None))
                .values(archived_at=utcnow())
            )
            await session.commit()

    async def reset_dms(self, platform: str, workspace: str, owner: str) -> None:
        """Archive `owner`'s live top-level DM conversations with the bot (a "new analysis"
        chosen where the DM's own channel id is not known, e.g. from a bot menu)."""
        async with self._sessions() as session:
            await session.exec(
                update(ThreadRow)
                .where(
                    col(ThreadRow.platform) == platform,
                    col(ThreadRow.workspace) == workspace,
                    col(ThreadRow.dm_owner) == owner,
                    col(ThreadRow.root) == "main",
                    col(ThreadRow.archived_at).is_(None),
                )
                .values(archived_at=utcnow())
            )
            await session.commit()

    async def load_state(self, thread_id: str) -> ThreadState:
        """The conversation's working state (active skills, todos)."""
        async with self._sessions() as session:
            raw = (await session.exec(select(ThreadRow.state).where(ThreadRow.id == thread_id))).one()
        return ThreadState.model_validate_json(raw or "{}")

    async def save_state(self, thread_id: str, state: ThreadState) -> None:
        async with self._sessions() as session:
            await session.exec(
                update(ThreadRow).where(col(ThreadRow.id) == thread_id).values(state=state.model_dump_json())
            )
            await session.commit()

    def revalidate(self, thread_id: str) -> None:
        """Check the database for newer messages on the next read (call when a turn starts)."""
        cached = self._cache.get(thread_id)
        if cached is not None:
            cached.verified = False

    async def history(self, thread_id: str) -> list[StandardMessage]:
        """All messages of the conversation in order (a shared list: do not mutate it)."""
        return (await self._refresh(thread_id)).messages

    async def api_history(self, thread_id: str) -> list[dict[str, Any]]:
        """The conversation in Messages API shape, kept incrementally (do not mutate)."""
        return (await self._refresh(thread_id)).api

    async def has_event(self, thread_id: str, event_key: str) -> bool:
        """Whether the user message of inbound event `event_key` is already stored."""
        return event_key in (await self._refresh(thread_id)).event_keys

    async def append(
        self, thread_id: str, messages: list[StandardMessage], event_key: str | None = None
    ) -> None:
        """Append messages at the end of the conversation, in one transaction."""
        if not messages:
            return
        cached = await self._refresh(thread_id)
        rows = [
            MessageRow(
                id=message.id,
                thread_id=thread_id,
                seq=cached.last_seq + offset,
                role=message.role.value,
                content=json.dumps(_dump_blocks(message), ensure_ascii=False),
                schema_version=message.schema_version,
                event_key=event_key,
                created_at=message.created_at,
            )
            for offset, message in enumerate(messages, start=1)
        ]
        async with self._sessions() as session:
            await insert_rows(session, *rows)
            await session.exec(_TOUCH_THREAD, params={"thread_id": thread_id, "now": utcnow()})
            await session.commit()
        for message in messages:
            cached.messages.append(message)
            append_api_message(cached.api, message)
        cached.last_seq += len(rows)
        if event_key:
            cached.event_keys.add(event_key)

    async def _refresh(self, thread_id: str) -> _CachedHistory:
        cached = self._cache.get(thread_id)
        if cached is None:
            cached = _CachedHistory()
            self._cache[thread_id] = cached
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        self._cache.move_to_end(thread_id)
        if cached.verified:
            return cached
        async with self._sessions() as session:
            last_seq = (
                await session.exec(
                    select(func.coalesce(func.max(MessageRow.seq), 0)).where(
                        MessageRow.thread_id == thread_id
                    )
                )
            ).one()
            cached.verified = True
            if last_seq == cached.last_seq:
                return cached
            rows = (
                await session.exec(
                    select(MessageRow)
                    .where(MessageRow.thread_id == thread_id, MessageRow.seq > cached.last_seq)
                    .order_by(col(MessageRow.seq))
                )
            ).all()
        for row in rows:
            message = message_from_row(row)
            cached.messages.append(message)
            append_api_message(cached.api, message)
            if row.event_key:
                cached.event_keys.add(row.event_key)
            cached.last_seq = row.seq
        return cached

    @staticmethod
    async def _live_thread_id(session: AsyncSession, key: ThreadKey) -> str | None:
        result = await session.exec(
            select(ThreadRow.id).where(ThreadRow.key == str(key), col(ThreadRow.archived_at).is_(None))
        )
        return result.first()


def _dump_blocks(message: StandardMessage) -> list[dict[str, Any]]:
    return [block.model_dump() for block in message.content]
