"""The earlier messages of a message's platform thread that the model has not seen, rendered as
context for its turn (`agent_core.thread_context`), fetched by the worker that answers (never on
the acknowledgement path).

"Not seen" is judged against the conversation the gateway keeps: in a conversation without
history, the whole thread before the message; in one with history, what came after the bot's
last post and was not itself a message of the conversation.
"""

from __future__ import annotations

import asyncio
import logging

from adapters.base import Responder, ThreadHistory
from agent_core.messages import InboundMessage
from agent_core.store.threads import ThreadStore
from agent_core.thread_context import render

log = logging.getLogger(__name__)


async def earlier_messages(store: ThreadStore, responder: Responder, msg: InboundMessage, thread_id: str) -> str | None:
    """The block to put before ``msg`` in conversation ``thread_id``; None when there is none
    or the platform could not be asked (the question is still answered)."""
    if not isinstance(responder, ThreadHistory):
        return None
    if await store.has_event(thread_id, msg.dedupe_key):
        return None  # a retried turn: its message, with its context, is stored already
    try:
        context = await responder.thread_context(msg)
    except Exception as exc:
        log.warning("earlier thread messages of %s not fetched: %s", msg.thread, type(exc).__name__)
        return None
    if context is None:
        return None
    joined = bool(await store.history(thread_id))
    answered: set[str] = set()
    if joined:
        for earlier in context.messages:
            if await store.has_event(thread_id, msg.model_copy(update={"message_id": earlier.message_id}).dedupe_key):
                answered.add(earlier.message_id)
    return await asyncio.to_thread(render, context.unseen(joined=joined, answered=answered.__contains__))
