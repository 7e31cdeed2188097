"""Multi-dimensional root-cause localization: which dimension=value combinations explain why a
metric deviated from its baseline (forecast, or a previous period).

Method (own design, in the family of Adtributor / HotSpot / Squeeze / RiskLoc)
------------------------------------------------------------------------------
1. Every leaf gets a *deviation score* ``ds = 2 (actual - baseline) / (|actual| + |baseline|)``
   (Squeeze's bounded relative deviation), standardized by a noise scale estimated robustly per
   leaf-size bin (small leaves are noisier), so ``z`` is ~N(0, 1) on normal leaves.
2. Root causes follow the *ripple effect*: all leaves under a root-cause element move by a
   common-ish relative amount. For a candidate element ``e`` with ``n`` leaves, the evidence is
   the log-likelihood ratio of "its leaves share a shifted mean" against "they are normal",
   with a variance shrunk towards the noise level so one-leaf elements cannot look perfect:
   ``gain = n/2 * log(1 + mean(z)^2 / s^2)``. An element whose leaves only partly moved has a
   small mean and a large spread, so the element that exactly covers the moved leaves wins.
3. Parsimony (a description-length penalty): each asserted element costs
   ``log(K) + 0.5 log(n) + beta`` nats (``K`` = elements in its cuboid: naming one of them, plus
   its shift parameter). Within a cuboid elements are disjoint, so the best hypothesis is every
   element with positive net gain; cuboids of layers 0..max_layer are compared by their summed
   net gain. A coarser cuboid wins when the same leaves can be named with fewer elements.
4. Layer by layer search in rounds: the best cuboid's elements are asserted, their leaves
   removed, and the search repeats on the remaining leaves (root causes may sit in different
   cuboids) until nothing has positive net gain. The noise scale is then re-estimated on the
   leaves outside the asserted root causes and the whole search runs once more.

Ratio metrics (conversion rate, AOV) are localized twice: on the per-leaf *rate*
(numerator/denominator) and on the per-leaf *volume* of the denominator against its typical
growth (where the mix moved). Each asserted element's contribution to the ratio change is split
into a rate effect (its own ratio changed) and a mix effect (denominator share moved between it
and the rest), an exact midpoint decomposition of the element-versus-rest ratio.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import date
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, model_validator

__all__ = [
    "AttributionConfig",
    "AttributionResult",
    "Candidate",
    "Period",
    "RootCause",
    "attribute_change",
    "attribute_change_between_periods",
]

JsonScalar = str | int | float | bool | None


# --------------------------------------------------------------------------------------------
# Boundary models
# --------------------------------------------------------------------------------------------


class Period(BaseModel):
    """An inclusive date range."""

    start: date
    end: date

    @model_validator(mode="after")
    def _ordered(self) -> Period:
        if self.end < self.start:
            raise ValueError("period end is before its start")
        return self

    @property
    def days(self) -> int:
        """Number of calendar days in the range."""
        return (self.end - self.start).days + 1


class AttributionConfig(BaseModel):
    """Tuning knobs of the localization search (defaults tuned on the synthetic benchmark)."""

    max_layer: int = Field(default=3, ge=1, le=6, description="deepest cuboid layer searched")
    element_penalty: float = Field(
        default=2.0, ge=0, description="extra description cost (nats) per asserted element (beta)"
    )
    ripple_jitter: float = Field(
        default=0.2, gt=0, description="relative spread of the shift among a root cause's leaves"
    )
    min_shift: float = Field(
        default=0.5, ge=0, description="smallest material mean shift, in units of leaf noise"
    )
    variance_prior: float = Field(
        default=3.0,
        gt=0,
        description="pseudo-leaves of noise variance shrinking each element's spread",
    )
    max_rounds: int = Field(
        default=4, ge=1, description="rounds of the search on unexplained leaves"
    )
    max_candidates: int = Field(default=20, ge=1, description="length of the ranked candidate list")


class RootCause(BaseModel):
    """One asserted root-cause element and how much of the deviation it carries.

    For additive metrics ``baseline``/``actual`` are the element's metric totals and
    ``contribution`` is ``actual - baseline``. For ratio metrics they are the element's ratio
    and ``contribution`` is its part of the overall ratio change (``rate_effect + mix_effect``).
    Leaves are counted once: under the first asserted root cause that covers them.
    """

    element: dict[str, JsonScalar]
    layer: int
    baseline: float
    actual: float
    contribution: float
    share: float = Field(description="contribution / total deviation")
    relative_change: float | None = Field(description="actual / baseline - 1 of the element")
    score: float = Field(description="net evidence in nats (higher is stronger)")
    rate_effect: float | None = None
    mix_effect: float | None = None
    effect: Literal["rate", "mix", "rate+mix"] | None = None


class Candidate(BaseModel):
    """A scored element from the search (asserted or not)."""

    element: dict[str, JsonScalar]
    layer: int
    score: float
    contribution: float
    share: float
    relative_change: float | None
    selected: bool
    kind: Literal["value", "rate", "mix"] = "value"


class AttributionResult(BaseModel):
    """Outcome of a root-cause localization."""

    metric_kind: Literal["additive", "ratio"]
    dimensions: list[str]
    total_baseline: float
    total_actual: float
    total_deviation: float
    relative_change: float | None
    root_causes: list[RootCause]
    explained_share: float = Field(description="sum of root-cause shares")
    candidates: list[Candidate]
    explanation: str
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Core search
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    """An element found by the search: cuboid dims, value codes, its leaves, its evidence."""

    dims: tuple[int, ...]
    values: tuple[int, ...]
    leaves: np.ndarray  # indices of the (active) leaves it covers
    score: float
    selected: bool


class _Cube:
    """Integer-coded leaves with cached per-cuboid element ids."""

    _DENSE_LIMIT = 2_000_000  # largest cuboid numbered densely (mixed radix) rather than compacted

    def __init__(self, codes: np.ndarray, cards: list[int]) -> None:
        self.codes = codes
        self.cards = cards
        self._cache: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray | None]] = {}

    def cuboid(self, dims: tuple[int, ...]) -> np.ndarray:
        """Per-leaf element id within cuboid ``dims``."""
        if dims not in self._cache:
            sizes = [self.cards[d] for d in dims]
            table: np.ndarray | None = None
            if not dims:
                ids = np.zeros(len(self.codes), dtype=np.int64)
            elif math.prod(sizes) <= self._DENSE_LIMIT:
                ids = np.ravel_multi_index(tuple(self.codes[:, d] for d in dims), sizes)
            else:  # sparse high-cardinality cuboid: number only the combinations present
                table, ids = np.unique(self.codes[:, list(dims)], axis=0, return_inverse=True)
            self._cache[dims] = (np.asarray(ids, dtype=np.int64).ravel(), table)
        return self._cache[dims][0]

    def values(self, dims: tuple[int, ...], element_id: int) -> tuple[int, ...]:
        """Value codes (one per dimension of ``dims``) of an element id."""
        table = self._cache[dims][1]
        if table is not None:
            return tuple(int(v) for v in table[element_id])
        sizes = [self.cards[d] for d in dims]
        return tuple(int(v) for v in np.unravel_index(element_id, sizes)) if dims else ()


def _robust_scale(x: np.ndarray) -> float:
    """Scale of the normal (zero-centred) part of ``x`` when an unknown fraction is shifted.

    Starts from a low quantile of |x| (dominated by normal leaves even when most leaves are
    anomalous), then iterates: estimate the normal fraction ``p`` from the points within 3
    scales, and read the scale off the ``p/2`` quantile of |x| (the half-normal median)."""
    a = np.abs(x[np.isfinite(x)])
    if len(a) == 0:
        return 0.0
    scale = float(np.quantile(a, 0.1)) / 0.1257
    for _ in range(8):
        if scale <= 0:
            break
        p = min(1.0, float(np.mean(a < 3 * scale)) / 0.9973)
        new = float(np.quantile(a, max(0.5 * p, 0.05))) / 0.6745
        if abs(new - scale) <= 1e-3 * scale:
            scale = new
            break
        scale = new
    if scale <= 0:  # many leaves exactly unchanged: fall back to the mean absolute deviation
        scale = float(np.mean(a)) * 1.2533
    return scale


def _leaf_sigma(ds: np.ndarray, size: np.ndarray, normal: np.ndarray, floor: float) -> np.ndarray:
    """Noise scale per leaf, estimated in leaf-size bins (small leaves are noisier).

    ``normal`` marks leaves known not to be under an asserted root cause (all, in pass one)."""
    n_bins = int(min(10, max(1, normal.sum() // 1000)))
    sigma = np.empty(len(ds))
    if n_bins == 1:
        sigma[:] = _robust_scale(ds[normal])
    else:
        edges = np.quantile(size[normal], np.linspace(0, 1, n_bins + 1)[1:-1])
        bins = np.searchsorted(edges, size)
        for b in range(n_bins):
            here = bins == b
            sel = here & normal
            sigma[here] = _robust_scale(ds[sel]) if sel.sum() >= 50 else _robust_scale(ds[normal])
    return np.maximum(sigma, floor)


def _deviation_score(baseline: np.ndarray, actual: np.ndarray) -> np.ndarray:
    """Squeeze's bounded relative deviation, 0 where both sides are 0."""
    denom = np.abs(actual) + np.abs(baseline)
    with np.errstate(invalid="ignore", divide="ignore"):
        ds = np.where(denom > 0, 2.0 * (actual - baseline) / denom, 0.0)
    return ds


def _score_cuboid(
    cube: _Cube, dims: tuple[int, ...], z: np.ndarray, active: np.ndarray, cfg: AttributionConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Net evidence (nats) of every non-empty element of a cuboid: (element ids, net score)."""
    ids = cube.cuboid(dims)
    idx = ids[active]
    za = z[active]
    n = np.bincount(idx)
    present = np.flatnonzero(n)
    n = n[present].astype(float)
    s1 = np.bincount(idx, weights=za)[present]
    s2 = np.bincount(idx, weights=za * za)[present]
    mean = s1 / n
    var = np.maximum(s2 / n - mean * mean, 0.0)
    # Only a material shift counts: soft-threshold the mean by ``min_shift`` noise units, so a
    # systematic bias of a fraction of the noise over many leaves is not called a root cause.
    mean = np.sign(mean) * np.maximum(np.abs(mean) - cfg.min_shift, 0.0)
    # Under the ripple effect an element's leaves share a shift up to a relative jitter, so its
    # spread is at least noise + (jitter * shift)^2. Using that floor (rather than a possibly
    # tiny sample variance) caps the evidence per leaf at ~1/(2 jitter^2) nats, so splitting
    # one element into finer ones gains nothing and only pays their penalties. A sample spread
    # above the floor (leaves that moved differently, e.g. only some of them) is shrunk towards
    # the floor with a prior worth ``variance_prior`` leaves.
    floor = 1.0 + (cfg.ripple_jitter * mean) ** 2
    spread = np.maximum(floor, (n * var + cfg.variance_prior * floor) / (n + cfg.variance_prior))
    # Log-likelihood ratio of N(mean, spread) against N(0, null) on the element's leaves, where
    # the null variance is max(1, spread): an element that is merely noisier than the rest is
    # not evidence of a shift, only a shifted mean is.
    null = np.maximum(spread, 1.0)
    gain = 0.5 * n * ((mean * mean + var) / null - var / spread + np.log(null / spread))
    penalty = math.log(len(present)) + 0.5 * np.log(n) + cfg.element_penalty
    return present, gain - penalty


def _search(
    cube: _Cube, z: np.ndarray, usable: np.ndarray, cfg: AttributionConfig
) -> tuple[list[_Hit], list[_Hit]]:
    """Rounds of layer-by-layer cuboid search; returns (asserted hits, ranked candidates)."""
    n_dims = len(cube.cards)
    cuboids = [
        dims
        for layer in range(0, min(cfg.max_layer, n_dims) + 1)
        for dims in itertools.combinations(range(n_dims), layer)
    ]
    active = usable.copy()
    selected: list[_Hit] = []
    pool: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}
    for round_no in range(cfg.max_rounds):
        if not active.any():
            break
        best: tuple[float, tuple[int, ...], np.ndarray, np.ndarray] | None = None
        for dims in cuboids:
            present, net = _score_cuboid(cube, dims, z, active, cfg)
            pos = net > 0
            if not pos.any():
                continue
            if round_no == 0:
                for eid, score in zip(present[pos], net[pos], strict=True):
                    pool[(dims, cube.values(dims, int(eid)))] = float(score)
            total = float(net[pos].sum())
            if best is None or total > best[0]:
                best = (total, dims, present[pos], net[pos])
        if best is None:
            break
        _, dims, eids, nets = best
        ids = cube.cuboid(dims)
        found = [
            _Hit(dims, cube.values(dims, int(eid)), np.flatnonzero(active & (ids == eid)), s, True)
            for eid, s in sorted(zip(eids, nets.tolist(), strict=True), key=lambda t: -t[1])
        ]
        for hit in found:
            active[hit.leaves] = False
        selected.extend(found)

    chosen = {(h.dims, h.values) for h in selected}
    ranked = sorted(pool.items(), key=lambda kv: -kv[1])[: cfg.max_candidates]
    candidates = [
        _Hit(dims, values, _element_leaves(cube, dims, values), s, (dims, values) in chosen)
        for (dims, values), s in ranked
    ]
    return selected, candidates


def _element_leaves(cube: _Cube, dims: tuple[int, ...], values: tuple[int, ...]) -> np.ndarray:
    mask = np.ones(len(cube.codes), dtype=bool)
    for d, v in zip(dims, values, strict=True):
        mask &= cube.codes[:, d] == v
    return np.flatnonzero(mask)


def _localize(
    cube: _Cube,
    ds: np.ndarray,
    size: np.ndarray,
    usable: np.ndarray,
    cfg: AttributionConfig,
) -> tuple[list[_Hit], list[_Hit]]:
    """Two passes: noise scale from all leaves, then re-estimated outside the asserted causes."""
    floor = 1e-3  # relative deviations below 0.1 % are treated as exact agreement
    normal = usable.copy()
    selected: list[_Hit] = []
    candidates: list[_Hit] = []
    for _pass in range(2):
        if normal.sum() < 3:
            break
        sigma = _leaf_sigma(ds, size, normal, floor)
        z = np.where(usable, ds / sigma, 0.0)
        selected, candidates = _search(cube, z, usable, cfg)
        normal = usable.copy()
        for hit in selected:
            normal[hit.leaves] = False
    return selected, candidates


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _encode(df: pd.DataFrame, dimensions: list[str]) -> tuple[_Cube, list[np.ndarray]]:
    """Integer-code the dimension columns (missing values become the label "(missing)")."""
    codes = np.empty((len(df), len(dimensions)), dtype=np.int64)
    uniques: list[np.ndarray] = []
    for j, col in enumerate(dimensions):
        col_codes, col_uniques = pd.factorize(df[col].astype(object).fillna("(missing)"))
        codes[:, j] = col_codes
        uniques.append(np.asarray(col_uniques, dtype=object))
    return _Cube(codes, [max(1, len(u)) for u in uniques]), uniques


def _py(value: object) -> JsonScalar:
    """A JSON-friendly Python scalar for a dimension value."""
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _element_dict(
    hit: _Hit, dimensions: list[str], uniques: list[np.ndarray]
) -> dict[str, JsonScalar]:
    return {dimensions[d]: _py(uniques[d][v]) for d, v in zip(hit.dims, hit.values, strict=True)}


def _aggregate_leaves(df: pd.DataFrame, dimensions: list[str], columns: list[str]) -> pd.DataFrame:
    """Sum value columns per leaf (duplicate leaf rows are added up)."""
    missing = [c for c in [*dimensions, *columns] if c not in df.columns]
    if missing:
        raise ValueError(f"columns not found: {missing}")
    if not dimensions:
        raise ValueError("at least one dimension column is needed")
    keyed = df[dimensions].astype(object).fillna("(missing)")
    values = df[columns].apply(pd.to_numeric, errors="coerce").fillna(0.0)
    frame = pd.concat([keyed, values], axis=1)
    grouped = frame.groupby(dimensions, sort=False, observed=True, dropna=False)[columns]
    return grouped.sum().reset_index()


def attribute_change(
    df: pd.DataFrame,
    dimensions: list[str],
    baseline_column: str | None = None,
    actual_column: str | None = None,
    *,
    numerator: tuple[str, str] | None = None,
    denominator: tuple[str, str] | None = None,
    config: AttributionConfig | None = None,
    metric_name: str = "The metric",
) -> AttributionResult:
    """Localize the root causes of a metric's deviation from its baseline.

    Additive metric: pass ``baseline_column`` (forecast or previous period) and
    ``actual_column``. Ratio metric: pass ``numerator=(baseline_col, actual_col)`` and
    ``denominator=(baseline_col, actual_col)``; the ratio is sum(numerator)/sum(denominator).
    Rows are leaves (duplicates are summed). Returns the asserted root causes (as many as the
    evidence supports, possibly none), a ranked candidate list and a plain-language explanation.
    """
    cfg = config or AttributionConfig()
    dimensions = list(dimensions)
    if (numerator is None) != (denominator is None):
        raise ValueError("a ratio metric needs both numerator and denominator columns")
    if numerator is not None and denominator is not None:
        if baseline_column is not None or actual_column is not None:
            raise ValueError("give either baseline/actual columns or numerator/denominator")
        leaves = _aggregate_leaves(df, dimensions, [*numerator, *denominator])
        return _attribute_ratio(leaves, dimensions, numerator, denominator, cfg, metric_name)
    if baseline_column is None or actual_column is None:
        raise ValueError("baseline_column and actual_column are required for an additive metric")
    leaves = _aggregate_leaves(df, dimensions, [baseline_column, actual_column])
    return _attribute_additive(leaves, dimensions, baseline_column, actual_column, cfg, metric_name)


def _attribute_additive(
    leaves: pd.DataFrame,
    dimensions: list[str],
    baseline_column: str,
    actual_column: str,
    cfg: AttributionConfig,
    metric_name: str,
) -> AttributionResult:
    cube, uniques = _encode(leaves, dimensions)
    f = leaves[baseline_column].to_numpy(dtype=float)
    v = leaves[actual_column].to_numpy(dtype=float)
    total_f, total_v = float(f.sum()), float(v.sum())
    deviation = total_v - total_f
    notes: list[str] = []
    if (f < 0).any() or (v < 0).any():
        notes.append("negative values present: relative deviations assume a non-negative metric")

    # Empty leaves (zero on both sides) cannot show a relative change: leave them out.
    usable = (f != 0) | (v != 0)
    selected, candidates = (
        _localize(cube, _deviation_score(f, v), (np.abs(f) + np.abs(v)) / 2, usable, cfg)
        if len(f) >= 3
        else ([], [])
    )
    if len(f) < 3:
        notes.append("fewer than 3 leaves: too few to localize a root cause")

    def stats(idx: np.ndarray) -> tuple[float, float, float, float, float | None]:
        fe, ve = float(f[idx].sum()), float(v[idx].sum())
        contrib = ve - fe
        share = contrib / deviation if deviation != 0 else 0.0
        rel = ve / fe - 1 if fe != 0 else None
        return fe, ve, contrib, share, rel

    root_causes: list[RootCause] = []
    for hit in selected:
        fe, ve, contrib, share, rel = stats(hit.leaves)
        root_causes.append(
            RootCause(
                element=_element_dict(hit, dimensions, uniques),
                layer=len(hit.dims),
                baseline=fe,
                actual=ve,
                contribution=contrib,
                share=share,
                relative_change=rel,
                score=hit.score,
            )
        )
    cands = []
    for hit in candidates:
        _, _, contrib, share, rel = stats(hit.leaves)
        cands.append(
            Candidate(
                element=_element_dict(hit, dimensions, uniques),
                layer=len(hit.dims),
                score=hit.score,
                contribution=contrib,
                share=share,
                relative_change=rel,
                selected=hit.selected,
            )
        )
    explained = float(sum(rc.share for rc in root_causes))
    return AttributionResult(
        metric_kind="additive",
        dimensions=dimensions,
        total_baseline=total_f,
        total_actual=total_v,
        total_deviation=deviation,
        relative_change=total_v / total_f - 1 if total_f != 0 else None,
        root_causes=root_causes,
        explained_share=explained,
        candidates=cands,
        explanation=_explain_additive(metric_name, total_f, total_v, root_causes),
        notes=notes,
    )


def _ratio_effects(
    n0: np.ndarray, d0: np.ndarray, n1: np.ndarray, d1: np.ndarray, idx: np.ndarray
) -> tuple[float, float, float, float]:
    """Rate and mix effect of the leaf group ``idx`` on the overall ratio change.

    Seen as two groups, the element ``e`` (share w of the denominator, ratio r) and the rest
    (ratio q): R = w r + (1 - w) q, so with midpoint values (bars) the change splits exactly as
    dR = wbar * dr  [rate of e]  +  dw * (rbar - qbar)  [mix: share moved between e and the
    rest]  +  (1 - wbar) * dq  [the rest's own rates]. Moving share towards a segment that
    converts worse than the rest is a negative mix effect. A group absent in one period takes
    its ratio from the other period (a pure mix effect). Returns (rate, mix, r0, r1)."""
    D0, D1 = float(d0.sum()), float(d1.sum())
    ne0, de0, ne1, de1 = (float(a[idx].sum()) for a in (n0, d0, n1, d1))
    qn0, qd0 = float(n0.sum()) - ne0, D0 - de0
    qn1, qd1 = float(n1.sum()) - ne1, D1 - de1
    r0 = ne0 / de0 if de0 else (ne1 / de1 if de1 else 0.0)
    r1 = ne1 / de1 if de1 else r0
    q0 = qn0 / qd0 if qd0 else (qn1 / qd1 if qd1 else 0.0)
    q1 = qn1 / qd1 if qd1 else q0
    w0 = de0 / D0 if D0 else 0.0
    w1 = de1 / D1 if D1 else 0.0
    rate = 0.5 * (w0 + w1) * (r1 - r0)
    mix = (w1 - w0) * (0.5 * (r0 + r1) - 0.5 * (q0 + q1))
    return rate, mix, r0, r1


def _weighted_median(x: np.ndarray, w: np.ndarray) -> float:
    order = np.argsort(x)
    cum = np.cumsum(w[order])
    return float(x[order][np.searchsorted(cum, 0.5 * cum[-1])])


def _attribute_ratio(
    leaves: pd.DataFrame,
    dimensions: list[str],
    numerator: tuple[str, str],
    denominator: tuple[str, str],
    cfg: AttributionConfig,
    metric_name: str,
) -> AttributionResult:
    cube, uniques = _encode(leaves, dimensions)
    n0, n1 = (leaves[c].to_numpy(dtype=float) for c in numerator)
    d0, d1 = (leaves[c].to_numpy(dtype=float) for c in denominator)
    D0, D1 = float(d0.sum()), float(d1.sum())
    if D0 <= 0 or D1 <= 0:
        raise ValueError("the denominator must have a positive total in both periods")
    R0, R1 = float(n0.sum()) / D0, float(n1.sum()) / D1
    deviation = R1 - R0
    notes: list[str] = []
    size = (d0 + d1) / 2

    # Rate: leaves present in both periods. Mix: share of the denominator.
    both = (d0 > 0) & (d1 > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_ds = _deviation_score(np.where(both, n0 / d0, 0.0), np.where(both, n1 / d1, 0.0))
    # Mix: a leaf's volume against the typical growth of all leaves (the weighted median of
    # per-leaf growth). Comparing shares instead would make every other leaf look shifted
    # when one segment grows, since shares sum to one.
    grows = d0 > 0
    growth = _weighted_median(d1[grows] / d0[grows], d0[grows]) if grows.any() else D1 / D0
    mix_ds = _deviation_score(growth * d0, d1)
    found: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[_Hit, set[str]]] = {}
    ranked: list[tuple[_Hit, str]] = []
    if len(leaves) >= 3:
        for kind, ds, usable in (
            ("rate", rate_ds, both),
            ("mix", mix_ds, (d0 > 0) | (d1 > 0)),
        ):
            if usable.sum() < 3:
                continue
            selected, candidates = _localize(cube, ds, size, usable, cfg)
            for hit in selected:
                key = (hit.dims, hit.values)
                if key in found:
                    found[key][1].add(kind)
                else:
                    found[key] = (hit, {kind})
            ranked.extend((hit, kind) for hit in candidates)
    else:
        notes.append("fewer than 3 leaves: too few to localize a root cause")

    root_causes: list[RootCause] = []
    claimed = np.zeros(len(leaves), dtype=bool)
    for hit, kinds in sorted(found.values(), key=lambda t: -t[0].score):
        # Count each leaf once, and a rate cause over all its leaves (not just the usable ones).
        idx = _element_leaves(cube, hit.dims, hit.values)
        idx = idx[~claimed[idx]]
        if len(idx) == 0:
            continue
        claimed[idx] = True
        rate, mix, r0, r1 = _ratio_effects(n0, d0, n1, d1, idx)
        contrib = rate + mix
        effect: Literal["rate", "mix", "rate+mix"] = (
            "rate+mix" if len(kinds) == 2 else ("rate" if "rate" in kinds else "mix")
        )
        root_causes.append(
            RootCause(
                element=_element_dict(hit, dimensions, uniques),
                layer=len(hit.dims),
                baseline=r0,
                actual=r1,
                contribution=contrib,
                share=contrib / deviation if deviation else 0.0,
                relative_change=r1 / r0 - 1 if r0 else None,
                score=hit.score,
                rate_effect=rate,
                mix_effect=mix,
                effect=effect,
            )
        )
    cands: list[Candidate] = []
    for hit, kind in sorted(ranked, key=lambda t: -t[0].score)[: cfg.max_candidates]:
        rate, mix, r0, r1 = _ratio_effects(n0, d0, n1, d1, hit.leaves)
        cands.append(
            Candidate(
                element=_element_dict(hit, dimensions, uniques),
                layer=len(hit.dims),
                score=hit.score,
                contribution=rate + mix,
                share=(rate + mix) / deviation if deviation else 0.0,
                relative_change=r1 / r0 - 1 if r0 else None,
                selected=hit.selected,
                kind=kind,  # type: ignore[arg-type]
            )
        )
    return AttributionResult(
        metric_kind="ratio",
        dimensions=dimensions,
        total_baseline=R0,
        total_actual=R1,
        total_deviation=deviation,
        relative_change=R1 / R0 - 1 if R0 else None,
        root_causes=root_causes,
        explained_share=float(sum(rc.share for rc in root_causes)),
        candidates=cands,
        explanation=_explain_ratio(metric_name, R0, R1, root_causes),
        notes=notes,
    )


def attribute_change_between_periods(
    df: pd.DataFrame,
    time_column: str,
    dimensions: list[str],
    baseline_period: Period,
    comparison_period: Period,
    metric_column: str | None = None,
    *,
    numerator_column: str | None = None,
    denominator_column: str | None = None,
    normalize_period_length: bool = True,
    config: AttributionConfig | None = None,
) -> AttributionResult:
    """Localize why a metric changed between two periods of a long table.

    ``df`` has a time column, the dimension columns and either ``metric_column`` (additive) or
    ``numerator_column`` and ``denominator_column`` (ratio). Rows are summed per leaf within each
    (inclusive) period. For an additive metric and periods of different lengths, the baseline is
    rescaled to the comparison period's length (per-day basis) unless
    ``normalize_period_length`` is False; ratios need no rescaling.
    """
    if (metric_column is None) == (numerator_column is None or denominator_column is None):
        raise ValueError(
            "give either metric_column or both numerator_column and denominator_column"
        )
    times = pd.to_datetime(df[time_column])
    if getattr(times.dt, "tz", None) is not None:
        times = times.dt.tz_localize(None)
    day = times.dt.normalize()

    def in_period(p: Period) -> pd.Series:
        return (day >= pd.Timestamp(p.start)) & (day <= pd.Timestamp(p.end))

    base_mask, comp_mask = in_period(baseline_period), in_period(comparison_period)
    if not base_mask.any() or not comp_mask.any():
        raise ValueError("one of the periods contains no rows")
    value_cols = [metric_column] if metric_column else [numerator_column, denominator_column]
    cols = [c for c in value_cols if c is not None]
    base = _aggregate_leaves(df.loc[base_mask], dimensions, cols)
    comp = _aggregate_leaves(df.loc[comp_mask], dimensions, cols)
    keyed_base = base.set_index(dimensions)
    keyed_comp = comp.set_index(dimensions)
    merged = keyed_base.add_suffix("__base").join(keyed_comp.add_suffix("__comp"), how="outer")
    merged = merged.fillna(0.0).reset_index()
    notes = [
        f"baseline {baseline_period.start}..{baseline_period.end}, "
        f"comparison {comparison_period.start}..{comparison_period.end}"
    ]
    if metric_column is not None:
        if normalize_period_length and baseline_period.days != comparison_period.days:
            factor = comparison_period.days / baseline_period.days
            merged[f"{metric_column}__base"] *= factor
            notes.append(
                f"baseline rescaled by {factor:.3g} to the comparison period's length "
                f"({baseline_period.days} vs {comparison_period.days} days)"
            )
        result = attribute_change(
            merged,
            dimensions,
            f"{metric_column}__base",
            f"{metric_column}__comp",
            config=config,
            metric_name=metric_column,
        )
    else:
        result = attribute_change(
            merged,
            dimensions,
            numerator=(f"{numerator_column}__base", f"{numerator_column}__comp"),
            denominator=(f"{denominator_column}__base", f"{denominator_column}__comp"),
            config=config,
            metric_name=f"{numerator_column}/{denominator_column}",
        )
    return result.model_copy(update={"notes": [*notes, *result.notes]})


# --------------------------------------------------------------------------------------------
# Explanations
# --------------------------------------------------------------------------------------------


def _fmt_element(element: dict[str, JsonScalar]) -> str:
    return " & ".join(f"{k}={v}" for k, v in element.items()) or "all segments"


def _fmt_num(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def _explain_additive(metric: str, total_f: float, total_v: float, causes: list[RootCause]) -> str:
    change = total_v - total_f
    rel = f" ({change / total_f:+.1%})" if total_f else ""
    head = f"{metric} moved from {_fmt_num(total_f)} to {_fmt_num(total_v)}{rel}."
    if not causes:
        return head + " No segment deviates beyond normal noise; no root cause is asserted."
    parts = []
    for rc in causes:
        rel_e = f", {rc.relative_change:+.0%} vs baseline" if rc.relative_change is not None else ""
        parts.append(
            f"{_fmt_element(rc.element)} ({_fmt_num(rc.contribution)}{rel_e}; "
            f"{rc.share:.0%} of the change)"
        )
    explained = sum(rc.share for rc in causes)
    noun = "root cause" if len(causes) == 1 else "root causes"
    return f"{head} {len(causes)} {noun} explain {explained:.0%} of the change: " + (
        "; ".join(parts) + "."
    )


def _explain_ratio(metric: str, r0: float, r1: float, causes: list[RootCause]) -> str:
    head = f"{metric} moved from {r0:.4g} to {r1:.4g} ({r1 - r0:+.4g})."
    if not causes:
        return head + " No segment's rate or share deviates beyond normal noise."
    parts = []
    for rc in causes:
        driver = {
            "rate": "its own ratio changed",
            "mix": "its share of the denominator changed",
            "rate+mix": "both its ratio and its share changed",
        }[rc.effect or "rate"]
        parts.append(
            f"{_fmt_element(rc.element)}: {driver} ({rc.baseline:.4g} -> {rc.actual:.4g}); "
            f"rate effect {rc.rate_effect:+.4g}, mix effect {rc.mix_effect:+.4g} "
            f"({rc.share:.0%} of the change)"
        )
    return head + " " + "; ".join(parts) + "."
