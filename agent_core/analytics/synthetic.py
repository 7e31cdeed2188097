"""Generators of labelled time series for the analytics core (shared by tests and bench): a
daily KPI with weekly seasonality, trend and holidays, and a minute-level series with a daily
cycle, each with injected anomaly windows. Everything is driven by a seed so that a series can
be regenerated exactly. (Root-cause cases for attribution: ``rca_benchmark``.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = [
    "LabelledSeries",
    "TrueWindow",
    "make_daily_kpi_series",
    "make_minute_series",
]


# --------------------------------------------------------------------------------------------
# Labelled time series
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrueWindow:
    """A labelled anomaly window (inclusive) and its kind."""

    start: pd.Timestamp
    end: pd.Timestamp
    kind: str  # "spike", "drop", "level_shift_up", "level_shift_down"


@dataclass(frozen=True)
class LabelledSeries:
    """A series (``timestamp``, ``value``) with its true anomaly windows.

    ``holidays`` are dates whose effect is *expected* (a documented, recurring calendar effect):
    they are labelled normal, and a detector is told about them via its ``holidays`` argument.
    """

    frame: pd.DataFrame
    windows: list[TrueWindow]
    holidays: list[pd.Timestamp] = field(default_factory=list)
    freq: str = "D"


def _place_windows(
    rng: np.random.Generator, n: int, lengths: list[int], margin: int, gap: int, blocked: set[int]
) -> list[tuple[int, int] | None]:
    """Place non-overlapping windows at random positions, away from edges and blocked points.

    Returns one entry per requested length, in order (None where no room was found)."""
    placed: list[tuple[int, int] | None] = []
    for length in lengths:
        spot = None
        for _ in range(500):
            start = int(rng.integers(margin, n - margin - length))
            end = start + length - 1
            clash = any(p is not None and start - gap <= p[1] and end + gap >= p[0] for p in placed)
            if not clash and not any(start - 2 <= b <= end + 2 for b in blocked):
                spot = (start, end)
                break
        placed.append(spot)
    return placed


def make_daily_kpi_series(
    seed: int,
    n_days: int = 120,
    n_anomalies: int | None = None,
    noise: float = 0.03,
    with_holidays: bool = True,
    start: str = "2024-01-01",
) -> LabelledSeries:
    """A daily GMV-like KPI: level ~10k, linear trend, weekly seasonality (weekend dip),
    multiplicative Gaussian noise, optional holidays (labelled normal, returned in
    ``holidays``) and ``n_anomalies`` (0-4; random 2-4 if None) injected events: one-day spikes
    and drops of 15-60 %, and level shifts of 12-40 % lasting 3-7 days."""
    rng = np.random.default_rng(seed)
    idx = pd.date_range(start, periods=n_days, freq="D")
    t = np.arange(n_days)
    weekly = np.array([1.0, 1.02, 1.03, 1.05, 1.1, 0.82, 0.78])  # Mon..Sun
    weekly = np.roll(weekly, -idx[0].day_of_week)
    level = 10_000 * (1 + rng.uniform(-0.002, 0.004) * t)
    expected = level * np.tile(weekly, n_days // 7 + 1)[:n_days]
    value = expected * (1 + rng.normal(0, noise, n_days))

    holidays: list[int] = []
    if with_holidays:
        holidays = sorted(rng.choice(np.arange(14, n_days - 7), size=2, replace=False).tolist())
        for h in holidays:
            value[h] *= rng.uniform(0.55, 0.75)

    k = n_anomalies if n_anomalies is not None else int(rng.integers(2, 5))
    kinds = [str(rng.choice(["spike", "drop", "level_shift"])) for _ in range(k)]
    lengths = [1 if kd in ("spike", "drop") else int(rng.integers(3, 8)) for kd in kinds]
    spots = _place_windows(rng, n_days, lengths, margin=14, gap=7, blocked=set(holidays))
    windows: list[TrueWindow] = []
    for spot, kind in zip(spots, kinds, strict=True):
        if spot is None:
            continue
        s, e = spot
        if kind == "level_shift":
            sign = rng.choice([-1.0, 1.0])
            value[s : e + 1] *= 1 + sign * rng.uniform(0.12, 0.4)
            kind = "level_shift_up" if sign > 0 else "level_shift_down"
        elif kind == "spike":
            value[s : e + 1] *= 1 + rng.uniform(0.15, 0.6)
        else:
            value[s : e + 1] *= 1 - rng.uniform(0.15, 0.6)
        windows.append(TrueWindow(idx[s], idx[e], kind))
    frame = pd.DataFrame({"timestamp": idx, "value": value})
    windows.sort(key=lambda w: w.start)
    return LabelledSeries(frame, windows, [idx[h] for h in holidays], "D")


def make_minute_series(
    seed: int,
    n_days: int = 5,
    n_anomalies: int | None = None,
    start: str = "2024-03-04",
) -> LabelledSeries:
    """Per-minute request counts with a daily cycle (night trough, daytime peak), Poisson-like
    noise (variance grows with the level) and ``n_anomalies`` (random 2-4 if None) injected
    windows of 5-60 minutes: outages (50-90 % drop) and surges (40-100 % rise)."""
    rng = np.random.default_rng(seed)
    n = n_days * 1440
    idx = pd.date_range(start, periods=n, freq="min")
    minute = np.arange(n) % 1440
    cycle = (
        1
        + 0.6 * np.sin(2 * np.pi * (minute - 480) / 1440)
        + 0.15 * np.sin(4 * np.pi * minute / 1440)
    )
    expected = rng.uniform(150, 400) * cycle
    value = rng.normal(expected, np.sqrt(expected))

    k = n_anomalies if n_anomalies is not None else int(rng.integers(2, 5))
    lengths = [int(rng.integers(5, 61)) for _ in range(k)]
    spots = _place_windows(rng, n, lengths, margin=1440 // 2, gap=240, blocked=set())
    windows: list[TrueWindow] = []
    for spot in spots:
        if spot is None:
            continue
        s, e = spot
        if rng.random() < 0.5:
            value[s : e + 1] *= 1 - rng.uniform(0.5, 0.9)
            kind = "drop"
        else:
            value[s : e + 1] *= 1 + rng.uniform(0.4, 1.0)
            kind = "spike"
        windows.append(TrueWindow(idx[s], idx[e], kind))
    windows.sort(key=lambda w: w.start)
    frame = pd.DataFrame({"timestamp": idx, "value": np.maximum(value, 0.0)})
    return LabelledSeries(frame, windows, [], "min")
