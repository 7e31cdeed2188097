"""Close tool calls a crash left without results, so the stored history stays valid.

The API rejects a `tool_use` that is not followed by its `tool_result`. If a turn died between
the model asking for tools and their results being stored, the next run answers each open call
with a "cancelled" result before it asks the model again.
"""

from __future__ import annotations

from typing import Protocol

from agent_core.hooks import Hook
from agent_core.messages import Role, StandardMessage, ToolResultBlock
from agent_core.run_context import RunContext
from agent_core.store.threads import ThreadStore

CANCELLED_RESULT = "Cancelled: this tool call was interrupted before it finished and was not run."


class _Appends(Protocol):
    async def append(
        self, thread_id: str, messages: list[StandardMessage], event_key: str | None = None
    ) -> None: ...


async def close_open_calls(store: _Appends, thread_id: str, history: list[StandardMessage]) -> None:
    """Answer the tool calls of the newest message that have no results with "cancelled"."""
    # Results are stored right after their calls, so only the newest message can dangle.
    if not history or history[-1].role is not Role.ASSISTANT:
        return
    open_calls = history[-1].tool_uses()
    if open_calls:
        blocks = [
            ToolResultBlock(tool_use_id=call.id, content=CANCELLED_RESULT, is_error=True) for call in open_calls
        ]
        await store.append(thread_id, [StandardMessage(thread_id=thread_id, role=Role.USER, content=blocks)])


class DanglingToolCallPatch(Hook):
    def __init__(self, store: ThreadStore) -> None:
        self._store = store

    async def before_run(self, history: list[StandardMessage], ctx: RunContext) -> None:
        await close_open_calls(self._store, ctx.thread_id, history)
