"""Labelled root-cause cases built like the published semi-synthetic localization benchmarks.

The construction follows Squeeze's dataset B (ISSRE 2019; the "B0-B4" sets RiskLoc also
evaluates on) and RiskLoc's generator, rather than an idealised cube:

* four dimensions ``a, b, c, d`` with 5 / 40 / 10 / 10 values and every combination present
  (20,000 leaves), about half of them empty (zero in both columns). Empty leaves are not
  scattered uniformly: unpopular values are empty more often, as in real cubes;
* leaf volumes are heavy-tailed (popularity effects per dimension value times a Weibull draw);
* ``predict`` is the forecast: the true value with multiplicative leaf-level Gaussian noise
  whose level, for a median-sized leaf, is one of :data:`NOISE_LEVELS` (clean to 25 %);
  small leaves are up to twice as noisy, large ones down to half;
* ``real`` is the true value, except under the injected root causes: ``layer`` 1-3 and 1-3
  elements in one cuboid (Squeeze's ``B_cuboid_layer_L_n_ele_K`` settings), each with its own
  magnitude -- mostly drops of a few percent up to -100 % (an outage), else rises; in a fifth
  of the cases not all in the same direction -- and a per-leaf jitter of up to 15 % of the
  magnitude, so the ripple effect holds only approximately.

A magnitude is never below five standard errors of the forecast noise of the element's
non-empty leaves (``5 * sqrt(sum(noise_i^2)) / n``, a few percent at least): below that no
method can tell the element from noise among thousands of candidates, and the case would
measure luck. Everything is driven by a seed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["NOISE_LEVELS", "RootCauseCase", "make_rca_case"]

# Forecast noise levels (relative standard deviation), one per Squeeze-style "B" set.
NOISE_LEVELS: tuple[float, ...] = (0.0, 0.05, 0.10, 0.15, 0.25)
CARDINALITIES: tuple[int, ...] = (5, 40, 10, 10)


@dataclass(frozen=True)
class RootCauseCase:
    """One labelled case: ``leaves`` has the dimension columns, ``real`` and ``predict``.

    ``root_causes`` is the ground truth, one ``{dimension: value}`` dict per element;
    ``magnitudes`` the injected relative change of each (``-1.0`` = dropped to zero)."""

    leaves: pd.DataFrame
    dimensions: list[str]
    root_causes: list[dict[str, str]]
    magnitudes: list[float]
    layer: int
    noise: float


def make_rca_case(
    seed: int,
    layer: int | None = None,
    n_elements: int | None = None,
    noise: float | None = None,
    cardinalities: tuple[int, ...] = CARDINALITIES,
    root_causes: list[dict[str, str]] | None = None,
    magnitudes: list[float] | None = None,
) -> RootCauseCase:
    """Generate one case; ``layer`` (1-3), ``n_elements`` (1-3) and ``noise`` (one of
    :data:`NOISE_LEVELS`) are drawn from the seed when not given.

    ``root_causes`` (e.g. ``[{"a": "a2"}, {"a": "a3"}]``) with their ``magnitudes`` (e.g.
    ``[-1.0, -0.6]``) place given root causes instead of random ones; an empty list gives a
    case where nothing happened. Either way each leaf's shift jitters around its magnitude."""
    rng = np.random.default_rng(seed)
    noise = noise if noise is not None else float(rng.choice(NOISE_LEVELS))
    n_dims = len(cardinalities)
    names = [chr(ord("a") + d) for d in range(n_dims)]
    codes = np.stack(
        [g.ravel() for g in np.meshgrid(*[np.arange(c) for c in cardinalities], indexing="ij")],
        axis=1,
    )
    n = len(codes)

    # Volumes: popularity of each dimension value (log-normal) times a heavy-tailed leaf draw.
    effects = [rng.normal(0.0, 0.8, size=c) for c in cardinalities]
    popularity = sum(e[codes[:, d]] for d, e in enumerate(effects))
    base = 100.0 * np.exp(popularity) * rng.weibull(rng.uniform(0.6, 1.2), n)
    # About half of the leaves are empty, mostly the unpopular combinations.
    zero_rate = rng.uniform(0.4, 0.6)
    emptiness = -popularity + rng.normal(0.0, 1.0, n)
    base[emptiness > np.quantile(emptiness, 1.0 - zero_rate)] = 0.0

    # Forecast: multiplicative noise, larger on small leaves (counts are noisier there).
    nonzero = base > 0
    median = float(np.median(base[nonzero]))
    leaf_noise = noise * np.clip((np.maximum(base, 1e-9) / median) ** -0.25, 0.5, 2.0)
    predict = np.maximum(base * (1.0 + rng.normal(0.0, 1.0, n) * leaf_noise), 0.0)
    real = base.copy()

    if root_causes is None:
        layer = layer if layer is not None else int(rng.integers(1, 4))
        k = n_elements if n_elements is not None else int(rng.integers(1, 4))
        if not 1 <= layer <= min(3, n_dims):
            raise ValueError("layer must be 1, 2 or 3 (and at most the number of dimensions)")
        dims, elements = _pick_elements(rng, codes, nonzero, layer, k)
        truth = [{names[d]: f"{names[d]}{int(codes[members[0], d]) + 1}" for d in dims} for members in elements]
        magnitudes = _draw_magnitudes(rng, [leaf_noise[m][nonzero[m]] for m in elements])
    else:
        if magnitudes is None or len(magnitudes) != len(root_causes):
            raise ValueError("give one magnitude per root cause")
        truth = root_causes
        elements = [_members(codes, names, element) for element in root_causes]
        layer = max((len(e) for e in root_causes), default=0)
    for members, magnitude in zip(elements, magnitudes, strict=True):
        jitter = rng.uniform(0.0, 0.15)  # the ripple effect holds only approximately
        per_leaf = magnitude * (1.0 + rng.normal(0.0, jitter, len(members)))
        if magnitude <= -1.0:  # an outage leaves nothing behind
            per_leaf[:] = -1.0
        real[members] = base[members] * np.maximum(1.0 + per_leaf, 0.0)

    leaves = pd.DataFrame({names[d]: _labels(names[d], codes[:, d]) for d in range(n_dims)})
    leaves["real"] = real
    leaves["predict"] = predict
    return RootCauseCase(leaves, names, truth, [float(m) for m in magnitudes], layer, noise)


def _draw_magnitudes(rng: np.random.Generator, live_noise: list[np.ndarray]) -> list[float]:
    """One magnitude per element: mostly drops (15 % of them outages to zero), else rises; all
    in one direction in 80 % of the cases; never below five standard errors of the noise."""
    same_direction = rng.random() < 0.8
    first_sign = -1.0 if rng.random() < 0.7 else 1.0
    out: list[float] = []
    for noise_i in live_noise:
        floor = max(0.05, 5.0 * float(np.sqrt(np.sum(noise_i**2))) / max(1, len(noise_i)))
        sign = first_sign if same_direction else (-1.0 if rng.random() < 0.7 else 1.0)
        if sign < 0 and rng.random() < 0.15:
            out.append(-1.0)
        elif sign < 0:
            out.append(-rng.uniform(min(floor, 0.9), 0.95))
        else:
            out.append(rng.uniform(floor, max(1.5, 1.5 * floor)))
    return out


def _members(codes: np.ndarray, names: list[str], element: dict[str, str]) -> np.ndarray:
    """Leaf indices under ``element`` ({"a": "a2", ...}; values are the name plus 1-based code)."""
    mask = np.ones(len(codes), dtype=bool)
    for name, value in element.items():
        d = names.index(name)
        mask &= codes[:, d] == int(value[len(name) :]) - 1
    return np.flatnonzero(mask)


def _labels(name: str, codes: np.ndarray) -> np.ndarray:
    return np.array([f"{name}{v + 1}" for v in range(int(codes.max()) + 1)], dtype=object)[codes]


def _pick_elements(
    rng: np.random.Generator, codes: np.ndarray, nonzero: np.ndarray, layer: int, k: int
) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """A random cuboid of ``layer`` dimensions and ``k`` distinct elements of it, each with at
    least two non-empty leaves (an element whose leaves are all empty cannot change)."""
    cuboids = list(itertools.combinations(range(codes.shape[1]), layer))
    for _ in range(100):
        dims = cuboids[int(rng.integers(len(cuboids)))]
        _, ids = np.unique(codes[:, list(dims)], axis=0, return_inverse=True)
        ids = ids.ravel()
        live = np.bincount(ids, weights=nonzero.astype(float))
        eligible = np.flatnonzero(live >= 2)
        if len(eligible) >= k:
            picked = rng.choice(eligible, size=k, replace=False)
            return dims, [np.flatnonzero(ids == e) for e in picked]
    raise RuntimeError("could not place the root causes; try another seed")  # pragma: no cover
