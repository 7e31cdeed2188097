"""A conversation store held only in the process: for sub-agents, whose runs are not resumed."""

from __future__ import annotations

from typing import Any

from agent_core.messages import StandardMessage
from agent_core.request import api_messages
from agent_core.state import ThreadState


class EphemeralThreadStore:
    """Same interface as `ThreadStore` for one process-local conversation."""

    def __init__(self) -> None:
        self._messages: dict[str, list[StandardMessage]] = {}
        self._events: set[tuple[str, str]] = set()
        self._states: dict[str, ThreadState] = {}

    def revalidate(self, thread_id: str) -> None:
        """Nothing to check: only this process writes here."""

    async def history(self, thread_id: str) -> list[StandardMessage]:
        return self._messages.setdefault(thread_id, [])

    async def api_history(self, thread_id: str) -> list[dict[str, Any]]:
        return api_messages(await self.history(thread_id))

    async def has_event(self, thread_id: str, event_key: str) -> bool:
        return (thread_id, event_key) in self._events

    async def append(
        self, thread_id: str, messages: list[StandardMessage], event_key: str | None = None
    ) -> None:
        self._messages.setdefault(thread_id, []).extend(messages)
        if event_key:
            self._events.add((thread_id, event_key))

    async def load_state(self, thread_id: str) -> ThreadState:
        return self._states.setdefault(thread_id, ThreadState())

    async def save_state(self, thread_id: str, state: ThreadState) -> None:
        self._states[thread_id] = state
