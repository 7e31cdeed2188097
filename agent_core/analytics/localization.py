"""Root-cause localization on integer-coded leaves: the search behind `attribution`.

Given per-leaf baselines and actuals over integer-coded dimensions (a :class:`Cube`),
:func:`localize` finds the elements (dimension=value combinations, at any layer) whose leaves
moved together and that leave only forecast noise unexplained.

Method (own design, after studying Adtributor, HotSpot, Squeeze and RiskLoc)
----------------------------------------------------------------------------
The answer sought is the most parsimonious set of elements (at any layer) whose leaves moved
together and that leaves only forecast noise unexplained.

1. Every leaf is reduced to its actual/baseline ratio. A noise model of that ratio (centre,
   scale, outlier rate, in leaf-size bins) is learnt from the leaves that no element's median
   shows to have moved: medians are unbiased whatever side the noise sits on, and the elements
   holding moved leaves are set aside cuboid by cuboid before the noise is estimated.
2. Generalized ripple effect: under a root cause every leaf moves by a similar proportion
   ``k``. For each element of each cuboid (layers 1..3) ``k`` is fitted (the volume-weighted
   median ratio of its leaves, refined by the volume-weighted mean of the leaves it explains:
   robust to a few leaves of another cause). A leaf's loss is twice its negative
   log-likelihood under "its element moved by ``k``" (the noise, plus a jitter of the shift
   itself, ``tolerance * |k - 1|``), capped where the leaf is better taken for an outlier;
   ``k = 1`` is "nothing happened". Elements whose leaves only partly moved fit neither their
   moved nor their normal leaves; shifts under ``min_shift`` count for nothing.
3. Parsimony (minimum description length): an element costs ``2 log K + beta`` (naming one of
   its cuboid's K elements), a cuboid ``2 log C + gamma`` once for all its elements. The
   search is greedy over all elements of all cuboids: each step asserts the one element that
   lowers the total loss most, fitted on the leaves no earlier element explains, until
   nothing pays for itself. A parent whose children all moved alike gains what all its
   children gain together, so it is named first and the children are left with nothing to
   explain; root causes in different cuboids (overlapping ones too) are found in turn. A
   backward pass then drops elements the others make redundant.
4. The noise model is then re-estimated outside the asserted elements, the metric's unit
   (the granularity of a shift: a leaf of a few units cannot show a 40 % drop) is learnt from
   how their leaves scatter around their shifts, and the search is rerun.

Measured on the Squeeze B0 benchmark's development split (``bench/analytics.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field


class AttributionConfig(BaseModel):
    """Tuning knobs of the localization search (evidence is in loss units, twice nats). The
    defaults were set before the search took its current form and were left as they were:
    the method, not its constants, was fixed on the Squeeze B0 development split."""

    max_layer: int = Field(default=3, ge=1, le=6, description="deepest cuboid layer searched")
    element_penalty: float = Field(default=2.0, ge=0, description="evidence an element must show beyond naming it")
    cuboid_penalty: float = Field(default=4.0, ge=0, description="evidence a cuboid's elements must show beyond naming it")
    min_shift: float = Field(default=0.02, ge=0, description="relative shift of an element too small to matter")
    ripple_tolerance: float = Field(default=0.2, gt=0, description="relative spread of the shift among a root cause's leaves")
    outlier_cap: float = Field(default=3.0, gt=0, description="least standardized residual of a leaf taken as outlier")
    outlier_rate: float = Field(default=1e-3, gt=0, lt=1, description="prior share of outlying leaves (sets the cap)")
    noise_floor: float = Field(default=0.005, gt=0, description="smallest relative forecast noise assumed per leaf")
    shift_screen: float = Field(
        default=5.0,
        gt=0,
        description="z of an element's median shift that keeps its leaves out of the noise model",
    )
    max_rounds: int = Field(default=4, ge=1, description="rounds of the screen for moved elements")
    max_steps: int = Field(default=30, ge=1, description="most elements the search asserts")
    max_passes: int = Field(default=2, ge=1, description="searches with the noise re-estimated outside the causes")
    max_candidates: int = Field(default=10, ge=1, description="length of the ranked candidate list")
    max_root_causes: int = Field(default=10, ge=1, description="root causes listed in a result (the largest first)")



@dataclass(frozen=True)
class Hit:
    """An element found by the search: cuboid dims, value codes, its leaves, its evidence."""

    dims: tuple[int, ...]
    values: tuple[int, ...]
    leaves: np.ndarray  # indices of the (active) leaves it covers
    score: float  # net evidence in nats
    selected: bool
    shift: float = 1.0  # the fitted k: actual over baseline of its leaves


class Cube:
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
            if math.prod(sizes) <= self._DENSE_LIMIT:
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
        return tuple(int(v) for v in np.unravel_index(element_id, sizes))


def _cuboids(n_dims: int, max_layer: int) -> list[tuple[int, ...]]:
    """Every cuboid of layers 1..max_layer. The whole cube is not a candidate: with the noise
    centred where the bulk of the leaves sits, "everything moved alike" shows as no element
    standing out, which is what the explanation then says."""
    return [dims for layer in range(1, min(max_layer, n_dims) + 1) for dims in itertools.combinations(range(n_dims), layer)]


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
    return max(scale, 0.0)


@dataclass(frozen=True)
class _Noise:
    """Per-leaf noise model of the actual/baseline ratio: where normal leaves sit (``centre``),
    how far they scatter (``sigma``), the squared standardized residual beyond which a leaf is
    better taken for an outlier than for noise (``cap2``), and the granularity of a shift
    relative to the leaf (``grain``: one unit of the metric over the leaf's baseline)."""

    centre: np.ndarray
    sigma: np.ndarray
    cap2: np.ndarray
    grain: np.ndarray

    def take(self, idx: np.ndarray) -> _Noise:
        return _Noise(self.centre[idx], self.sigma[idx], self.cap2[idx], self.grain[idx])

    def with_grain(self, grain: np.ndarray) -> _Noise:
        return _Noise(self.centre, self.sigma, self.cap2, grain)


def _shift_var(k: np.ndarray, noise: _Noise, cfg: AttributionConfig) -> np.ndarray:
    """Variance of a leaf's ratio under "its element moved by ``k``": the forecast noise
    (scaled by ``k`` for a rise; a drop is not taken to make the leaves more precise than
    the noise, which would let any large element gain from a slight drop of its noisy
    leaves' scale), a jitter of the shift itself (``tolerance * |k - 1|``), and the
    granularity of the shift: a metric made of units (orders, visits) moves by whole units, as
    if each kept a share ``k`` of them (or gained ``k - 1`` more), so a leaf of a few units
    cannot show a 40 % drop; its variance is ``grain * |k - 1| * min(k, 1)``."""
    return (
        (np.maximum(k, 1.0) * noise.sigma) ** 2
        + (cfg.ripple_tolerance * (k - 1.0)) ** 2
        + noise.grain * np.abs(k - 1.0) * np.minimum(k, 1.0)
    )


def _noise_model(ratio: np.ndarray, size: np.ndarray, normal: np.ndarray, cfg: AttributionConfig) -> _Noise:
    """The noise model, estimated on ``normal`` leaves in leaf-size bins (small leaves are
    noisier and more often outlying).

    * The centre is not 1: with a noisy forecast ``f = x (1 + e)`` the ratio ``x / f`` is
      skewed (its mean is about ``1 + var(e)``). It is the mean of the leaves within ``cap``
      scales of it, the same trimmed mean the element fits compute, so that a group of normal
      leaves fits no shift rather than a spurious one.
    * The scale is calibrated so that the capped loss of normal leaves averages what it would
      under Gaussian noise (a robust scale alone underrates heavy shoulders).
    * The cap comes from a two-part model: Gaussian noise, plus outliers at the rate observed
      beyond 4 scales (shrunk towards a prior), spread over a range the size of the baseline.
      A leaf is an outlier where ``(1 - p) N(z)`` falls below ``p * sigma``: the cleaner the
      data, the more a large deviation says, and in heavy-tailed data no single leaf can carry
      an element."""
    cap = cfg.outlier_cap
    n_bins = int(min(10, max(1, normal.sum() // 1000)))
    edges = np.quantile(size[normal], np.linspace(0, 1, n_bins + 1)[1:-1]) if n_bins > 1 else []
    bins = np.searchsorted(edges, size)
    # E[min(Z^2, cap^2)] for a standard normal Z: what a calibrated scale gives on average.
    inside_p = math.erf(cap / math.sqrt(2))
    expected_loss = inside_p - 2 * cap * math.exp(-cap * cap / 2) / math.sqrt(2 * math.pi)
    expected_loss += cap * cap * (1 - inside_p)

    def fit(sel: np.ndarray) -> tuple[float, float, float]:
        r = ratio[sel]
        scale = max(_robust_scale(r - 1.0), cfg.noise_floor)
        centre = 1.0  # a forecast is unbiased on normal leaves, however many moved
        for _ in range(4):
            inside = np.abs(r - centre) < cap * scale
            centre = float(r[inside].mean()) if inside.any() else centre
            loss = np.minimum(((r - centre) / scale) ** 2, cap * cap)
            scale = max(scale * math.sqrt(float(loss.mean()) / expected_loss), cfg.noise_floor)
        # Outlier rate: the share beyond 4 scales, shrunk towards the prior rate with the
        # weight of 1000 leaves, so that in a small cube one moved leaf is not the norm.
        beyond = float(np.sum(np.abs(r - centre) > 4 * scale))
        rate = (beyond + 1000 * cfg.outlier_rate) / (len(r) + 1000)
        cap2 = 2.0 * math.log((1.0 - rate) / (rate * math.sqrt(2 * math.pi) * scale))
        return centre, scale, max(cap2, cap * cap)

    model = np.tile(np.asarray(fit(normal)), (len(ratio), 1))
    for b in range(n_bins if n_bins > 1 else 0):
        here = bins == b
        sel = here & normal
        if sel.sum() >= 50:
            model[here] = fit(sel)
    return _Noise(model[:, 0].copy(), model[:, 1].copy(), model[:, 2].copy(), np.zeros(len(ratio)))


def _grouped_median(ids: np.ndarray, x: np.ndarray, w: np.ndarray, n: int, by_x: np.ndarray) -> np.ndarray:
    """Weighted median of ``x`` per group id (NaN for a group without weight); ``by_x`` is
    ``argsort(x)``, shared by all cuboids (a stable sort of small ids is a radix sort)."""
    small = np.int16 if n < 2**15 else np.int64
    order = by_x[np.argsort(ids[by_x].astype(small), kind="stable")]
    sid, sw = ids[order], w[order]
    cw = np.cumsum(sw)
    total = np.bincount(sid, weights=sw, minlength=n)
    before = np.cumsum(total) - total
    pos = np.minimum(np.searchsorted(cw, before + 0.5 * total, side="left"), len(order) - 1)
    return np.where(total > 0, x[order][pos], np.nan)


def _leaf_loss(ratio: np.ndarray, k: np.ndarray, noise: _Noise, cfg: AttributionConfig) -> np.ndarray:
    """Per-leaf loss (twice the negative log-likelihood, relative to the noise alone) of the
    leaf's ratio under "its element moved by ``k``": expected at ``k * centre`` with the
    forecast noise scaled by ``k`` plus a jitter of the shift itself (``tolerance * |k - 1|``),
    capped where the leaf is better taken for an outlier. ``k = 1`` is "nothing happened".
    The log-variance term makes a wider tolerance pay for itself. An infinite ratio (a leaf
    appearing from a zero baseline) is explained only by an infinite ``k`` (an element that
    appeared as a whole)."""
    centre, sigma, cap2 = noise.centre, noise.sigma, noise.cap2
    finite_k = np.isfinite(k)
    kf = np.where(finite_k, k, 1.0)
    scale2 = _shift_var(kf, noise, cfg)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        z2 = (ratio - kf * centre) ** 2 / scale2 + np.log(scale2 / sigma**2)
    finite_r = np.isfinite(ratio)
    loss = np.where(finite_r & finite_k, np.minimum(z2, cap2), cap2)
    return np.where(~finite_r & ~finite_k, 0.0, loss)


def _fit_shifts(
    ids: np.ndarray, ratio: np.ndarray, weight: np.ndarray, noise: _Noise, n: int, by_x: np.ndarray, cfg: AttributionConfig
) -> np.ndarray:
    """The shift ``k`` of every element (ids ``0..n-1``) over the leaves given: the
    volume-weighted median ratio (robust to a few leaves of another cause), refined by the
    volume-weighted mean over the leaves it explains (the ripple effect: the element's
    actual over its forecast, outliers left out). An element whose leaves all came from a
    zero baseline has an infinite ``k``; shifts under ``min_shift`` count for nothing."""
    finite = np.isfinite(ratio)
    r = np.where(finite, ratio, 0.0)
    w = np.where(finite, weight, 0.0)
    k0 = _grouped_median(ids, r / noise.centre, w, n, by_x)
    k0_leaf = np.where(np.isfinite(k0), k0, 1.0)[ids]
    scale = np.sqrt(_shift_var(k0_leaf, noise, cfg))
    inside = finite & (np.abs(r - k0_leaf * noise.centre) <= cfg.outlier_cap * scale)
    wi = np.where(inside, w, 0.0)
    num = np.bincount(ids, weights=wi * noise.centre * r, minlength=n)
    den = np.bincount(ids, weights=wi * noise.centre**2, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(den > 0, num / den, k0)
    n_live = np.bincount(ids, weights=finite.astype(float), minlength=n)
    k = np.where(n_live == 0, np.inf, np.where(np.isfinite(k), k, 1.0))
    shrunk = 1.0 + np.sign(k - 1.0) * np.maximum(np.abs(k - 1.0) - cfg.min_shift, 0.0)
    return np.where(np.isfinite(k), shrunk, k)


@dataclass
class _Choice:
    dims: tuple[int, ...]
    eid: int
    k: float
    leaves: np.ndarray  # the leaves it claimed (not explained by an earlier choice)
    members: np.ndarray  # all its usable leaves
    cost: float
    net: float


def _search(
    cube: Cube,
    ratio: np.ndarray,
    weight: np.ndarray,
    noise: _Noise,
    usable: np.ndarray,
    cuboids: list[tuple[int, ...]],
    cfg: AttributionConfig,
) -> tuple[list[Hit], list[Hit]]:
    """Greedy search for the most parsimonious set of elements; returns (asserted hits,
    ranked candidates).

    Every leaf costs its loss under the best hypothesis that covers it ("nothing happened",
    or one asserted element's shift). An element costs ``2 log K + beta`` (naming one of its
    cuboid's K elements), a cuboid ``2 log C + gamma`` once for all its elements. Each step
    asserts the element (of any cuboid) that lowers the total most, fitted on the leaves no
    earlier element explains; its leaves are then explained. A parent whose children all
    moved alike gains what all of them gain together, so it is named before (and instead
    of) any child; an element that only partly moved fits neither its moved nor its normal
    leaves. Then, elements the others make redundant are dropped (backward elimination)."""
    cuboid_price = 2.0 * math.log(len(cuboids)) + cfg.cuboid_penalty
    null = _leaf_loss(ratio, np.ones(len(ratio)), noise, cfg)
    active = usable.copy()
    chosen: list[_Choice] = []
    pool: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}
    used: set[tuple[int, ...]] = set()
    for step in range(cfg.max_steps):
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        ratio_a, weight_a, noise_a, null_a = ratio[idx], weight[idx], noise.take(idx), null[idx]
        by_x = np.argsort(np.where(np.isfinite(ratio_a), ratio_a / noise_a.centre, 0.0))
        best: tuple[float, tuple[int, ...], int, float, float] | None = None
        for dims in cuboids:
            ids_all = cube.cuboid(dims)
            ids = ids_all[idx]
            n = int(ids.max()) + 1
            k = _fit_shifts(ids, ratio_a, weight_a, noise_a, n, by_x, cfg)
            gain = np.bincount(ids, weights=null_a - _leaf_loss(ratio_a, k[ids], noise_a, cfg), minlength=n)
            present = np.bincount(ids, minlength=n) > 0
            cost = 2.0 * math.log(max(int(present.sum()), 1)) + cfg.element_penalty
            net = np.where(present, gain - cost, -np.inf)
            if step == 0:
                for eid in np.flatnonzero(net > 0):
                    pool[(dims, cube.values(dims, int(eid)))] = 0.5 * float(net[eid])
            e = int(np.argmax(net))
            total = float(net[e]) - (0.0 if dims in used else cuboid_price)
            if total > 0 and (best is None or total > best[0]):
                best = (total, dims, e, float(k[e]), cost)
        if best is None:
            break
        total, dims, e, k_e, cost = best
        ids_all = cube.cuboid(dims)
        members = np.flatnonzero(usable & (ids_all == e))
        leaves = members[active[members]]
        chosen.append(_Choice(dims, e, k_e, leaves, members, cost, total))
        used.add(dims)
        active[leaves] = False
    chosen = _prune(chosen, ratio, noise, null, cuboid_price, cfg)
    selected = [Hit(c.dims, cube.values(c.dims, c.eid), c.leaves, 0.5 * c.net, True, c.k) for c in chosen]
    names = {(h.dims, h.values) for h in selected}
    ranked = sorted(pool.items(), key=lambda kv: -kv[1])[: cfg.max_candidates]
    candidates = [
        Hit(dims, values, element_leaves(cube, dims, values), s, (dims, values) in names) for (dims, values), s in ranked
    ]
    return selected, candidates


def _prune(
    chosen: list[_Choice], ratio: np.ndarray, noise: _Noise, null: np.ndarray, cuboid_price: float, cfg: AttributionConfig
) -> list[_Choice]:
    """Backward elimination: each leaf is explained by the best of the chosen elements that
    cover it; an element whose removal costs the others less than naming it is dropped (the
    least useful first), e.g. a child asserted before its parent."""
    chosen = list(chosen)
    while len(chosen) > 1:
        losses = [_leaf_loss(ratio[c.members], np.full(len(c.members), c.k), noise.take(c.members), cfg) for c in chosen]
        best = null.copy()
        for c, loss in zip(chosen, losses, strict=True):
            np.minimum.at(best, c.members, loss)
        worst: tuple[float, int] | None = None
        for j, c in enumerate(chosen):
            without = null[c.members].copy()
            for c2, loss2 in zip(chosen, losses, strict=True):
                if c2 is c:
                    continue
                pos = np.searchsorted(c2.members, c.members)
                pos = np.minimum(pos, len(c2.members) - 1)
                hit = c2.members[pos] == c.members
                without[hit] = np.minimum(without[hit], loss2[pos[hit]])
            alone = sum(1 for c2 in chosen if c2.dims == c.dims) == 1
            value = float((without - best[c.members]).sum()) - c.cost - (cuboid_price if alone else 0.0)
            if worst is None or value < worst[0]:
                worst = (value, j)
        assert worst is not None
        if worst[0] >= 0:
            break
        chosen.pop(worst[1])
    # Leaves are counted once, under the first kept element that covers them.
    claimed = np.zeros(len(ratio), dtype=bool)
    for c in chosen:
        c.leaves = c.members[~claimed[c.members]]
        claimed[c.members] = True
    return chosen


def element_leaves(cube: Cube, dims: tuple[int, ...], values: tuple[int, ...]) -> np.ndarray:
    mask = np.ones(len(cube.codes), dtype=bool)
    for d, v in zip(dims, values, strict=True):
        mask &= cube.codes[:, d] == v
    return np.flatnonzero(mask)


def _clearly_shifted(
    cube: Cube,
    ratio: np.ndarray,
    sigma: np.ndarray,
    live: np.ndarray,
    cuboids: list[tuple[int, ...]],
    cfg: AttributionConfig,
) -> np.ndarray:
    """Leaves of elements whose median ratio is far from 1, to keep out of the noise model.

    The median of the actual/baseline ratio is 1 on normal leaves whether the noise sits in
    the forecast or in the actual (the mean is not: the ratio is skewed), so an element's
    median tells whether it moved without knowing the noise's centre. The screen works like
    the search: the cuboid holding the most significant shift has its shifted elements set
    aside, and the medians are recomputed on the rest (an element that only overlaps a moved
    one is then seen for what it is), until nothing is shifted, the search's number of rounds
    is reached, or only a tenth of the leaves would be left to learn the noise from."""
    out = np.zeros(len(ratio), dtype=bool)
    room = int(live.sum()) - max(3, int(0.1 * live.sum()))
    for _ in range(cfg.max_rounds + 1):
        idx = np.flatnonzero(live & ~out)
        r, s = ratio[idx], sigma[idx]
        by_ratio = np.argsort(r)
        best: tuple[float, list[tuple[float, np.ndarray]]] | None = None
        for dims in cuboids:
            ids = cube.cuboid(dims)[idx]
            order = by_ratio[np.argsort(ids[by_ratio], kind="stable")]  # by element, then ratio
            sorted_ids = ids[order]
            starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
            counts = np.diff(np.r_[starts, len(order)])
            sorted_r = r[order]
            median = 0.5 * (sorted_r[starts + (counts - 1) // 2] + sorted_r[starts + counts // 2])
            spread = np.sqrt(np.bincount(ids, weights=s * s)[sorted_ids[starts]] / counts)
            z = np.abs(median - 1.0) / (1.2533 * spread / np.sqrt(counts))  # SE of a median
            shifted = np.flatnonzero((z > cfg.shift_screen) & (counts >= 3))
            if len(shifted) and (best is None or z[shifted].max() > best[0]):
                members = [(float(z[j]), idx[order[starts[j] : starts[j] + counts[j]]]) for j in shifted]
                best = (float(z[shifted].max()), members)
        if best is None:
            break
        for _, leaves in sorted(best[1], key=lambda t: -t[0]):
            if len(leaves) <= room:
                out[leaves] = True
                room -= len(leaves)
            else:
                return out
    return out


def _granularity(f: np.ndarray, ratio: np.ndarray, noise: _Noise, hits: list[Hit], cfg: AttributionConfig) -> np.ndarray:
    """Per-leaf ``grain`` (the metric's unit over the leaf's baseline), the unit learnt from
    the leaves of the asserted elements: the one, on a grid from 0 to a few median leaves,
    under which their ratios are likeliest. Whole units show where small leaves of a moved
    element stayed put or fell to zero while the large ones moved by the element's shift;
    a metric that moves smoothly gets 0 (no granularity)."""
    live = f > 0
    parts = [(h.leaves[live[h.leaves]], h.shift) for h in hits if np.isfinite(h.shift) and h.shift != 1.0]
    if not parts:
        return np.zeros(len(f))
    idx = np.concatenate([leaves for leaves, _ in parts])
    if len(idx) < 10:
        return np.zeros(len(f))
    k = np.concatenate([np.full(len(leaves), shift) for leaves, shift in parts])
    at = noise.take(idx)
    inverse = 1.0 / f[idx]
    median = float(np.median(f[live]))
    grid = [0.0, *(median * 10.0 ** np.linspace(-4.0, 0.5, 10))]
    losses = [float(_leaf_loss(ratio[idx], k, at.with_grain(unit * inverse), cfg).sum()) for unit in grid]
    unit = grid[int(np.argmin(losses))]
    return np.where(live, unit / np.where(live, f, 1.0), 0.0)


def localize(cube: Cube, f: np.ndarray, v: np.ndarray, cfg: AttributionConfig) -> tuple[list[Hit], list[Hit]]:
    """Root causes of ``v`` deviating from ``f`` (non-negative per-leaf baseline and actual).

    The noise model is estimated on the leaves that no element's median shows to have moved
    (root-cause leaves among them would bias its centre and make sibling elements look
    shifted the other way). The search is then repeated (up to ``max_passes`` searches in all)
    with the noise re-estimated outside the asserted elements as well, and the metric's unit
    learnt from their leaves, until the answer no longer changes.

    Noise is binned by the geometric mean of baseline and actual: binning by the baseline
    alone would select on the forecast's own error (a leaf forecast low by chance lands in a
    smaller bin) and, the ratio being skewed, make popular elements look shifted."""
    usable = (f > 0) | (v > 0)  # an empty leaf cannot show a relative change
    live = f > 0
    if live.sum() < 3:
        return [], []
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(live, v / np.where(live, f, 1.0), np.inf)
    size = np.sqrt(f * v)
    cuboids = _cuboids(len(cube.cards), cfg.max_layer)
    rough = _noise_model(ratio, size, live, cfg)
    screened = live & ~_clearly_shifted(cube, ratio, rough.sigma, live, cuboids, cfg)
    keep = max(3, int(0.1 * live.sum()))
    normal = screened
    grain = np.zeros(len(f))
    answers: list[set[tuple[tuple[int, ...], tuple[int, ...]]]] = []
    for _pass in range(cfg.max_passes):
        noise = _noise_model(ratio, size, normal, cfg).with_grain(grain)
        selected, candidates = _search(cube, ratio, f, noise, usable, cuboids, cfg)
        answer = {(hit.dims, hit.values) for hit in selected}
        if answer in answers:
            break
        answers.append(answer)
        grain = _granularity(f, ratio, noise, selected, cfg)
        normal = screened.copy()
        for hit in sorted(selected, key=lambda h: -h.score):
            left = normal.copy()
            left[hit.leaves] = False
            if left.sum() >= keep:
                normal = left
    return selected, candidates
