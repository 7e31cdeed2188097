"""The shared backoff: every retry in the gateway and adapters waits by this one formula."""

from __future__ import annotations

from agent_core.retry import backoff_delay_s


def test_delays_double_up_to_the_cap() -> None:
    delays = [backoff_delay_s(n, first_s=0.5, max_s=3.0) for n in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    # A retry counter that keeps climbing (a connection down for days) stays at the cap.
    assert backoff_delay_s(5000, first_s=1.0, max_s=60.0) == 60.0


def test_jitter_spreads_delays_within_its_fraction() -> None:
    delays = {backoff_delay_s(3, first_s=1.0, max_s=60.0, jitter=0.2) for _ in range(200)}
    assert len(delays) > 1 and all(6.4 <= d <= 9.6 for d in delays)
