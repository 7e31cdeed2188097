"""Refocus reminders: restate the goal, the active skills and the open todos now and then.

Long tool chains drift. Every `every_calls` model calls, and on the first request after the
conversation sat idle (the flag `mark_idle_threads` sets), the request carries a
``<system-reminder>`` with the user's latest request, the active skill chain and the open
todos. It is the request's ``reminder``, which the model client appends as a text block to
the last user message of the request it sends: never stored, never posted to the chat, and
never in the stable prefix, so the prompt cache is not disturbed (the block before it gets its
own cache breakpoint, so the next request reads the cache written without the reminder).

Its place in the chain is after the compression hook and before prompt caching; being a field
of the request, the reminder survives the hooks that replace the message list.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.config import RefocusConfig
from agent_core.context.cutoff import latest_request_index
from agent_core.hooks import Hook
from agent_core.messages import StandardMessage, utcnow
from agent_core.request import ModelRequest
from agent_core.run_context import RunContext
from agent_core.state import ThreadState
from agent_core.store.tables import ThreadRow

log = logging.getLogger(__name__)

_MARKS = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}


class RefocusHook(Hook):
    """Adds the `<system-reminder>` to the request when one is due."""

    def __init__(self, config: RefocusConfig | None = None) -> None:
        self.config = config or RefocusConfig()

    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        state = ctx.turn.thread
        refocus = state.refocus
        idle = refocus.idle_resume
        if not idle and state.model_calls - refocus.last_reminder_call < self.config.every_calls:
            return request
        text = reminder_text(history, state, idle=idle, max_goal_chars=self.config.max_goal_chars)
        if text is None:  # nothing to add yet: stay due until there is
            return request
        refocus.last_reminder_call = state.model_calls
        refocus.idle_resume = False
        return replace(request, reminder=text)


def reminder_text(
    history: list[StandardMessage], state: ThreadState, *, idle: bool = False, max_goal_chars: int = 1500
) -> str | None:
    """The reminder, or None when it would only repeat the message the model is looking at."""
    request = latest_request_index(history)
    todos = state.open_todos()
    chain = state.skills.chain
    fresh_request = request == len(history) - 1  # the request is the newest message
    if fresh_request and not todos and not chain and not idle:
        return None
    lines = ["<system-reminder>", "Context for you, not a message from the user."]
    if idle:
        lines.append(
            "The conversation resumes after a pause: data may have changed since the earlier "
            "queries, so query again rather than reuse old figures."
        )
    if request is not None and not fresh_request:
        goal = history[request].text.strip()
        if len(goal) > max_goal_chars:
            goal = goal[:max_goal_chars] + "…"
        lines.append(f"The user's current request:\n{goal}")
    if chain:
        lines.append(f"Active skills: {' → '.join(chain)} (finish_skill when a skill's work is done).")
    if todos:
        lines.append("Open todos:\n" + "\n".join(f"{_MARKS[t.status]} {t.id}. {t.content}" for t in todos))
        lines.append("Continue with the next open step; do not redo finished ones.")
    lines.append("</system-reminder>")
    if len(lines) == 3:  # nothing but the frame (idle, fresh request, no work in flight)
        return None
    return "\n".join(lines)


async def mark_idle_threads(
    sessions: async_sessionmaker[AsyncSession],
    *,
    idle_after: timedelta = timedelta(hours=2),
    lookback: timedelta = timedelta(days=7),
    now: datetime | None = None,
) -> int:
    """Flag live conversations idle for `idle_after` (but active within `lookback`) so their
    next request carries a refocus reminder; returns how many were flagged.

    For a periodic scheduler job. A flag is written only if the thread was not touched since
    it was read (``updated_at`` unchanged): a turn starting meanwhile stores its user message
    first, which moves ``updated_at``, so the job never overwrites a running turn's state.
    """
    now = now or utcnow()
    newest = now - idle_after
    async with sessions() as session:
        rows = (
            await session.exec(
                select(ThreadRow.id, ThreadRow.state, ThreadRow.updated_at).where(
                    col(ThreadRow.archived_at).is_(None),
                    ThreadRow.updated_at < newest,
                    ThreadRow.updated_at >= newest - lookback,
                )
            )
        ).all()
        flagged = 0
        for thread_id, raw, updated_at in rows:
            state = ThreadState.model_validate_json(raw or "{}")
            if state.refocus.idle_resume or state.model_calls == 0:
                continue
            state.refocus.idle_resume = True
            result = await session.exec(
                update(ThreadRow)
                .where(col(ThreadRow.id) == thread_id, col(ThreadRow.updated_at) == updated_at)
                .values(state=state.model_dump_json())
            )
            flagged += result.rowcount
        await session.commit()
    if flagged:
        log.info("flagged %d idle conversations for a refocus reminder", flagged)
    return flagged
