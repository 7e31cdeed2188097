"""Waiting in tests: poll a condition until a deadline that stretches with the machine's load.

A deadline only matters when a test fails: a passing wait ends as soon as its condition holds. On a
machine where another job shares the cores, a fixed deadline fails tests that are merely slow, so
every budget here is multiplied by how oversubscribed the CPUs are (1 on a quiet machine, at most 8),
read again at each poll. `BA_TEST_TIME_SCALE` sets the factor instead.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

MAX_SCALE = 8.0


def time_scale() -> float:
    """How much longer than on a quiet machine things may take now."""
    fixed = os.environ.get("BA_TEST_TIME_SCALE")
    if fixed:
        return float(fixed)
    load_per_cpu = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(MAX_SCALE, max(1.0, load_per_cpu))


def scaled(seconds: float) -> float:
    """A budget of `seconds` on a quiet machine, stretched for the load now."""
    return seconds * time_scale()


class Deadline:
    """A budget that started now and stretches with the load while it runs."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._start = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def passed(self) -> bool:
        return self.elapsed() > scaled(self.seconds)


async def eventually(
    predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition", poll: float = 0.02
) -> None:
    """Wait until `predicate()` holds; fail with `what` when the (scaled) budget runs out."""
    deadline = Deadline(timeout)
    while not predicate():
        if deadline.passed():
            raise TimeoutError(f"timed out after {deadline.elapsed():.1f}s waiting for {what}")
        await asyncio.sleep(poll)


def eventually_sync(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition", poll: float = 0.02) -> None:
    """Blocking :func:`eventually`, for tests that drive processes from plain threads."""
    deadline = Deadline(timeout)
    while not predicate():
        if deadline.passed():
            raise TimeoutError(f"timed out after {deadline.elapsed():.1f}s waiting for {what}")
        time.sleep(poll)
