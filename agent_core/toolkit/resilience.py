"""When to retry a failed tool call, how long to wait, and when to stop calling a tool at all.

`RetryPolicy` is per tool and applies only to tools declared idempotent (running them twice is
harmless). `CircuitBreaker` is per tool and per process: after N consecutive failed calls the
tool is "open" (refused without running) for a cool-down, then one probe call is let through
("half-open"); its outcome closes the breaker or opens it again.

The breaker has no lock: its methods never await, so on one event loop each runs atomically.
Replicas each keep their own breakers, which is what we want -- a failing dependency is usually
seen by every replica, and a stuck one only by itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from agent_core.retry import backoff_delay_s
from agent_core.toolkit.formatting import ErrorType


class RetryPolicy(BaseModel):
    """Retries of one idempotent tool: which failures, how many, how far apart, how long."""

    model_config = ConfigDict(frozen=True)

    max_retries: int = Field(2, ge=0)
    retry_on: frozenset[ErrorType] = frozenset({ErrorType.TIMEOUT, ErrorType.RESOURCE_ERROR})
    initial_delay_s: float = Field(0.5, ge=0)
    backoff_multiplier: float = Field(2.0, ge=1)
    max_delay_s: float = Field(8.0, ge=0)
    # A call that timed out may just need longer: each retry gets a longer timeout.
    timeout_multiplier: float = Field(1.5, ge=1)
    max_timeout_s: float = Field(300.0, gt=0)

    def should_retry(self, error_type: ErrorType, retries_done: int) -> bool:
        """Whether a call that failed with ``error_type`` after ``retries_done`` retries goes again."""
        return error_type in self.retry_on and retries_done < self.max_retries

    def delay_s(self, retry: int) -> float:
        """Wait before retry number ``retry`` (1-based): exponential backoff, capped."""
        return backoff_delay_s(
            retry - 1, first_s=self.initial_delay_s, max_s=self.max_delay_s, factor=self.backoff_multiplier
        )

    def timeout_s(self, base_timeout_s: float, attempt: int) -> float:
        """Timeout of attempt ``attempt`` (0 = the first call), capped at ``max_timeout_s``."""
        return min(base_timeout_s * self.timeout_multiplier**attempt, max(self.max_timeout_s, base_timeout_s))


class BreakerState(StrEnum):
    CLOSED = "closed"  # calls run
    OPEN = "open"  # calls refused until the cool-down ends
    HALF_OPEN = "half_open"  # one probe call runs; others are refused until it ends


@dataclass(frozen=True)
class Admission:
    """The breaker's answer to one call: run it (``retry_after_s`` None) or wait."""

    retry_after_s: float | None = None
    probe: bool = False  # this call is the half-open probe

    @property
    def allowed(self) -> bool:
        return self.retry_after_s is None


class CircuitBreaker:
    """Stops calling a tool that keeps failing, for a cool-down, then probes it."""

    def __init__(
        self,
        failure_threshold: int = 5,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._probing or self._clock() - self._opened_at >= self.cooldown_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def acquire(self) -> Admission:
        """Ask to run a call. An admitted caller must `record` its outcome, even when cancelled."""
        state = self.state
        if state is BreakerState.CLOSED:
            return Admission()
        if state is BreakerState.OPEN and self._opened_at is not None:
            return Admission(retry_after_s=self.cooldown_s - (self._clock() - self._opened_at))
        if self._probing:
            # A probe is running and decides soon; ask again shortly, not after a full cool-down.
            return Admission(retry_after_s=min(self.cooldown_s, 1.0))
        self._probing = True  # half-open: this call is the probe
        return Admission(probe=True)

    def record(self, admission: Admission, ok: bool | None) -> None:
        """Report an admitted call's outcome: True ok, False failed, None abandoned (cancelled)."""
        if admission.probe:
            self._probing = False
        if ok is None:
            return
        if ok:
            self._failures = 0
            self._opened_at = None
            return
        self._failures += 1
        # A failed probe re-opens at once; otherwise open after `failure_threshold` in a row.
        if admission.probe or self._failures >= self.failure_threshold:
            self._opened_at = self._clock()
