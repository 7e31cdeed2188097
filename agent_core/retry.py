"""How long to wait before the next attempt: the one backoff formula every retry uses.

A function rather than tenacity or backoff: no caller retries a call in place with a decorator.
The dispatcher stores the next attempt's time in the database, the Feishu client prefers the
wait the server names in its rate-limit headers, the connection supervisor waits between
connections, the tool pipeline grows timeouts alongside the delays. They need the delay, not a
retry loop.
"""

from __future__ import annotations

import random


def backoff_delay_s(
    attempt: int, *, first_s: float, max_s: float, factor: float = 2.0, jitter: float = 0.0
) -> float:
    """The wait before retry `attempt` (0 for the first): `first_s * factor**attempt`, at most
    `max_s`, spread by ±`jitter` (a fraction) so that clients failing together do not retry in
    step."""
    try:
        delay = min(first_s * factor ** max(attempt, 0), max_s)
    except OverflowError:  # a float power past 1e308: long since capped
        delay = max_s
    if jitter:
        delay *= random.uniform(1 - jitter, 1 + jitter)
    return delay
