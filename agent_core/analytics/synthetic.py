"""Generators of labelled benchmark data for the analytics core (shared by tests and bench).

Two families:

* Root-cause cases in the style of the published semi-synthetic multi-dimensional root-cause
  datasets (Squeeze / RiskLoc "B"-style cases): a leaf table over 4-5 categorical dimensions with
  a forecast (``predict``) and an actual (``real``) column, root causes injected at cuboid layers
  1-3, and the ground-truth set of root-cause elements.
* Labelled time series: a daily KPI with weekly seasonality, trend and holidays, and a
  minute-level series with a daily cycle, each with injected anomaly windows.

Everything is driven by a seed so that a case can be regenerated exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

__all__ = [
    "RootCauseCase",
    "LabelledSeries",
    "TrueWindow",
    "make_root_cause_case",
    "make_daily_kpi_series",
    "make_minute_series",
]


# --------------------------------------------------------------------------------------------
# Root-cause (attribution) cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RootCauseCase:
    """One labelled root-cause case.

    ``leaves`` has one row per leaf: the dimension columns, ``real`` (actual) and ``predict``
    (forecast). ``root_causes`` is the ground truth: each element is a dict of dimension=value at
    the injected layer. ``magnitudes`` holds the signed relative change injected per element.
    """

    leaves: pd.DataFrame
    dimensions: list[str]
    root_causes: list[dict[str, str]]
    layer: int
    noise: float
    magnitudes: list[float]


def _leaf_codes(rng: np.random.Generator, cards: list[int], n_target: int) -> np.ndarray:
    """Sample distinct leaf combinations with skewed value popularity (as in real cubes)."""
    total = int(np.prod(cards, dtype=np.int64))
    if total <= n_target:
        grids = np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)
    # Zipf-like popularity per dimension value: some regions/channels have far more leaves.
    probs = [rng.dirichlet(np.full(c, 0.8)) for c in cards]
    keys = np.empty(0, dtype=np.int64)
    for _ in range(20):  # popular combinations repeat, so a few batches may be needed
        draw = np.stack(
            [rng.choice(c, size=n_target, p=p) for c, p in zip(cards, probs, strict=True)]
        )
        keys = np.unique(np.concatenate([keys, np.ravel_multi_index(tuple(draw), cards)]))
        if len(keys) >= n_target:
            break
    keys = keys[rng.permutation(len(keys))[:n_target]]
    return np.stack(np.unravel_index(keys, cards), axis=1)


def _group_ids(codes: np.ndarray, dims: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per-leaf group id for the combination of ``dims`` and the group sizes."""
    _, inverse, counts = np.unique(
        codes[:, list(dims)], axis=0, return_inverse=True, return_counts=True
    )
    return inverse.ravel(), counts


def _eligible_elements(
    codes: np.ndarray, dims: tuple[int, ...], min_leaves: int
) -> dict[tuple[int, ...], np.ndarray]:
    """Elements of cuboid ``dims`` with at least ``min_leaves`` leaves that differ from every
    ancestor (an element whose leaves are nearly all of its parent's is not identifiable)."""
    group, counts = _group_ids(codes, dims)
    leaf_count = counts[group]
    ok = leaf_count >= min_leaves
    for sub in range(1, len(dims)):
        for sub_dims in itertools.combinations(dims, sub):
            anc_group, anc_counts = _group_ids(codes, sub_dims)
            ok &= leaf_count <= 0.8 * anc_counts[anc_group]
    out: dict[tuple[int, ...], np.ndarray] = {}
    order = np.argsort(group, kind="stable")
    bounds = np.cumsum(counts)[:-1]
    for members in np.split(order, bounds):
        if ok[members[0]]:
            out[tuple(int(v) for v in codes[members[0], list(dims)])] = members
    return out


def make_root_cause_case(
    seed: int,
    layer: int | None = None,
    n_root_causes: int | None = None,
    n_dims: int | None = None,
    noise: float | None = None,
    noise_range: tuple[float, float] = (0.01, 0.05),
    min_leaves: int = 5,
) -> RootCauseCase:
    """Generate one semi-synthetic root-cause case.

    * 4-5 dimensions (``a``, ``b``, ...) with 5-40 values each; up to ~30k leaves with
      skewed value popularity, so deep cuboids are sparse as in real data.
    * Leaf values are log-normal with per-dimension-value effects (heavy-tailed).
    * 0-20 % of the leaves are empty (zero in both columns).
    * ``predict`` = leaf value with multiplicative Gaussian noise whose level is drawn from
      ``noise_range`` (1-5 % by default) unless ``noise`` is given.
    * ``layer`` (1-3) and ``n_root_causes`` (1-3) elements in one cuboid are drawn; every leaf
      under a root cause has ``real`` scaled by a common magnitude (10-80 % drop or 10-100 %
      rise) with 10 % relative jitter per leaf. In 80 % of cases all elements share a direction.
    """
    rng = np.random.default_rng(seed)
    layer = layer if layer is not None else int(rng.integers(1, 4))
    k = n_root_causes if n_root_causes is not None else int(rng.integers(1, 4))
    n_dims = n_dims if n_dims is not None else int(rng.integers(4, 6))
    noise = noise if noise is not None else float(rng.uniform(*noise_range))
    zero_rate = float(rng.uniform(0.0, 0.2))
    if not 1 <= layer <= n_dims:
        raise ValueError(f"layer must be within 1..{n_dims}")

    for _attempt in range(50):
        cards = [int(c) for c in rng.integers(5, 41, size=n_dims)]
        codes = _leaf_codes(rng, cards, int(rng.integers(5_000, 30_000)))
        dims = tuple(sorted(rng.choice(n_dims, size=layer, replace=False).tolist()))
        eligible = _eligible_elements(codes, dims, min_leaves)
        chosen = _pick_disjoint_elements(rng, codes, dims, eligible, k)
        if chosen is not None:
            break
    else:  # pragma: no cover - practically unreachable with these sizes
        raise RuntimeError("could not place root causes; try another seed")

    names = [chr(ord("a") + d) for d in range(n_dims)]
    effects = [rng.normal(0.0, 0.7, size=c) for c in cards]
    log_value = sum(e[codes[:, d]] for d, e in enumerate(effects)) + rng.normal(0, 1.0, len(codes))
    base = 100.0 * np.exp(log_value)
    # As in the published generators, some leaves are empty (zero in both columns).
    base[rng.random(len(base)) < zero_rate] = 0.0
    predict = base * (1.0 + rng.normal(0.0, noise, len(codes)))
    real = base.copy()

    same_direction = rng.random() < 0.8
    first_sign = rng.choice([-1.0, 1.0])
    magnitudes: list[float] = []
    root_causes: list[dict[str, str]] = []
    for key, idx in chosen:
        sign = first_sign if same_direction else rng.choice([-1.0, 1.0])
        size = rng.uniform(0.1, 0.8) if sign < 0 else rng.uniform(0.1, 1.0)
        per_leaf = size * (1.0 + rng.normal(0.0, 0.1, len(idx)))
        real[idx] = base[idx] * np.clip(1.0 + sign * per_leaf, 0.02, None)
        magnitudes.append(float(sign * size))
        root_causes.append({names[d]: f"{names[d]}{v + 1}" for d, v in zip(dims, key, strict=True)})

    leaves = pd.DataFrame(
        {names[d]: pd.Series([f"{names[d]}{v + 1}" for v in codes[:, d]]) for d in range(n_dims)}
    )
    leaves["real"] = real
    leaves["predict"] = predict
    return RootCauseCase(leaves, names, root_causes, layer, noise, magnitudes)


def _pick_disjoint_elements(
    rng: np.random.Generator,
    codes: np.ndarray,
    dims: tuple[int, ...],
    eligible: dict[tuple[int, ...], np.ndarray],
    k: int,
) -> list[tuple[tuple[int, ...], np.ndarray]] | None:
    """Draw ``k`` elements whose union is still distinguishable from any common ancestor."""
    keys = list(eligible)
    if len(keys) < k:
        return None
    for _ in range(30):
        picked = [keys[i] for i in rng.choice(len(keys), size=k, replace=False)]
        union = np.concatenate([eligible[p] for p in picked])
        # The union must not (nearly) fill a shared ancestor, or a coarser answer is equally true.
        ok = True
        for sub in range(1, len(dims)):
            for sub_dims in itertools.combinations(range(len(dims)), sub):
                vals = {tuple(p[j] for j in sub_dims) for p in picked}
                if len(vals) != 1:
                    continue
                anc = codes[:, [dims[j] for j in sub_dims]]
                n_anc = int(np.all(anc == np.asarray(next(iter(vals))), axis=1).sum())
                ok &= len(union) <= 0.8 * n_anc
        if k > 1 and len(union) > 0.8 * len(codes):
            ok = False
        if ok:
            return [(p, eligible[p]) for p in picked]
    return None


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
