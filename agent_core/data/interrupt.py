"""Queries that stop when their turn is cancelled (a person clicked Stop).

A query runs in a worker thread (`asyncio.to_thread`); cancelling the task that awaits it does
not stop the thread, and the database would go on scanning. `interruptible` runs the blocking
function with an `Interrupt` in its context (threads started by `to_thread` see the caller's
context variables), the engine code binds its connection's cancel to it (`on_interrupt`), and a
cancellation of the awaiting task fires it: DuckDB's `interrupt()`, PostgreSQL's cancel request.

A cancel only stops a statement the database is already running: one sent to a connection that
has not started its query yet is a no-op, and PostgreSQL may drop one that arrives in the very
first moment of a query (while it is still being planned or JIT-compiled). So a query whose turn
was stopped before it began does not begin, and a fired cancel is sent again until the query
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

from agent_core.data.errors import QueryTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")

RESEND_EVERY_S = 0.25  # a fired cancel is sent again this often while its query still runs


class Interrupt:
    """The cancel action of the query running now, fired at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel: Callable[[], object] | None = None
        self.fired = False

    def bind(self, cancel: Callable[[], object]) -> bool:
        """Bind the running query's cancel; False when the turn was stopped already (the query
        must not start: a cancel now would reach an idle connection and be lost)."""
        with self._lock:
            if self.fired:
                return False
            self._cancel = cancel
            return True

    def unbind(self) -> None:
        with self._lock:
            self._cancel = None

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            cancel = self._cancel
        if cancel is not None:
            _quietly(cancel)
            threading.Thread(target=self._resend, args=(cancel,), name="query-cancel", daemon=True).start()

    def _resend(self, cancel: Callable[[], object]) -> None:
        """Send `cancel` again until its query has ended (`unbind`)."""
        while True:
            time.sleep(RESEND_EVERY_S)
            with self._lock:
                if self._cancel is not cancel:
                    return
            _quietly(cancel)


_current: ContextVar[Interrupt | None] = ContextVar("ba_query_interrupt", default=None)


@contextlib.contextmanager
def on_interrupt(cancel: Callable[[], object]) -> Iterator[None]:
    """While the block runs, a cancellation of the awaiting turn calls `cancel` (from the event
    loop's thread: it must be safe to call from another thread, as DuckDB's `interrupt` and
    psycopg's `cancel_safe` are)."""
    interrupt = _current.get()
    if interrupt is None:
        yield
        return
    if not interrupt.bind(cancel):
        raise QueryTimeout("The query was stopped before it started.")
    try:
        yield
    finally:
        interrupt.unbind()


async def interruptible(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`asyncio.to_thread(fn, …)` whose query is cancelled with the awaiting task."""
    interrupt = Interrupt()
    token = _current.set(interrupt)
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except asyncio.CancelledError:
        interrupt.fire()
        raise
    finally:
        _current.reset(token)


def _quietly(cancel: Callable[[], object]) -> None:
    try:
        cancel()
    except Exception as exc:  # the connection may be closing; the turn ends anyway
        log.debug("query cancel failed: %s", type(exc).__name__)
