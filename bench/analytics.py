"""Benchmark of root-cause attribution (prints figures; it is a benchmark, not a test).

Run from the project root:  .venv/bin/python bench/analytics.py [--quick] [--cases N]

* Accuracy: semi-synthetic cases built like the published localization benchmarks (Squeeze's
  dataset B0-B4 / RiskLoc's generator; see agent_core.analytics.rca_benchmark): 20,000 leaves
  over four dimensions of 5/40/10/10 values, about half empty, a noisy forecast, root causes at
  layers 1-3 with 1-3 elements in one cuboid. N cases per (noise level, layer, element count);
  the seeds are disjoint from the ones the defaults were tuned on. Micro-F1 as in
  Squeeze/RiskLoc: predicted and true sets compared element by element (an element is a full
  {dimension: value} combination), TP/FP/FN summed over cases; per layer, per noise level,
  and seconds per case.
* The same cases go to three baselines implemented here from their papers: Adtributor
  (Bhagwan et al., NSDI 2014), HotSpot (Sun et al., IEEE Access 2018; its potential score is
  additive over the elements of a cuboid, so the best set of each size is the top elements and
  the MCTS is replaced by that exact search) and RiskLoc (Kalander, 2022; without its optional
  element pruning).
* Speed: one case through the tool (`AttributeChangeTool.run` on a CSV in the workspace), the
  wall time of the CLI (`ba-agent tool run attribute_change`, a new process), and a 200,000-leaf
  cube (the tool's row limit).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_core.analytics.attribution import attribute_change  # noqa: E402
from agent_core.analytics.rca_benchmark import NOISE_LEVELS, RootCauseCase, make_rca_case  # noqa: E402
from agent_core.run_context import RunContext  # noqa: E402
from agent_core.tools.analytics_tools import AttributeChangeInput, AttributeChangeTool  # noqa: E402
from agent_core.workspace.local import workspace_for  # noqa: E402

Element = frozenset[tuple[str, str]]


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


# ------------------------------------------------------------------------------------------
# Baselines (own implementations of the published methods, on integer-coded leaves)
# ------------------------------------------------------------------------------------------


class Leaves:
    """A case's leaves as integer codes, with per-cuboid element ids."""

    def __init__(self, case: RootCauseCase) -> None:
        self.dims = case.dimensions
        factorized = [pd.factorize(case.leaves[d]) for d in self.dims]
        self.codes = np.stack([codes for codes, _ in factorized], axis=1)
        self.labels = [np.asarray(labels, dtype=object) for _, labels in factorized]
        self.cards = [len(labels) for labels in self.labels]
        self.f = case.leaves["predict"].to_numpy(dtype=float)
        self.v = case.leaves["real"].to_numpy(dtype=float)

    def ids(self, cuboid: tuple[int, ...]) -> np.ndarray:
        return np.ravel_multi_index(tuple(self.codes[:, d] for d in cuboid), [self.cards[d] for d in cuboid])

    def element(self, cuboid: tuple[int, ...], eid: int) -> Element:
        values = np.unravel_index(eid, [self.cards[d] for d in cuboid])
        return frozenset((self.dims[d], str(self.labels[d][int(v)])) for d, v in zip(cuboid, values, strict=True))

    def cuboids(self, layer: int) -> list[tuple[int, ...]]:
        return list(itertools.combinations(range(len(self.dims)), layer))


def adtributor(leaves: Leaves, t_ep: float = 0.1, t_eep: float = 0.67, k: int = 3) -> set[Element]:
    """Adtributor: per dimension, elements by surprise (Jensen-Shannon term of the forecast vs
    actual share) with explanatory power above T_EP are added until they explain T_EEP of the
    change; the k dimensions with the most surprising explanatory sets are returned."""
    f, v = leaves.f, leaves.v
    big_f, big_v = f.sum(), v.sum()
    candidates: list[tuple[float, set[Element]]] = []
    for d in range(len(leaves.dims)):
        fe = np.bincount(leaves.codes[:, d], weights=f, minlength=leaves.cards[d])
        ve = np.bincount(leaves.codes[:, d], weights=v, minlength=leaves.cards[d])
        ep = (ve - fe) / (big_v - big_f)
        p, q = fe / big_f, ve / big_v
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.nan_to_num(p * np.log(2 * p / (p + q))) + np.nan_to_num(q * np.log(2 * q / (p + q)))
        surprise = 0.5 * terms
        chosen, explained = [], 0.0
        for e in np.argsort(-surprise):
            if ep[e] > t_ep:
                chosen.append(int(e))
                explained += ep[e]
            if explained > t_eep:
                elements = {leaves.element((d,), e) for e in chosen}
                candidates.append((float(surprise[chosen].sum()), elements))
                break
    candidates.sort(key=lambda c: -c[0])
    return set().union(*[elements for _, elements in candidates[:k]])


def hotspot(leaves: Leaves, pt: float = 0.67, max_layer: int = 3, max_set: int = 10) -> set[Element]:
    """HotSpot: the potential score of a set of elements of one cuboid is 1 - |v - a| / |v - f|
    with ``a`` the ripple-effect values (each chosen element's forecast scaled to its actual
    total). Layer by layer, the smallest set reaching ``pt`` is returned (the fewest elements,
    then the highest score); if none does, the best set found of at most ``max_set`` elements
    (the score only grows with more elements, and the MCTS builds small sets)."""
    f, v = leaves.f, leaves.v
    total = float(np.sum((v - f) ** 2))
    best_overall: tuple[float, int, tuple[int, ...], np.ndarray] | None = None
    for layer in range(1, max_layer + 1):
        passing: list[tuple[int, float, tuple[int, ...], np.ndarray]] = []
        for cuboid in leaves.cuboids(layer):
            ids = leaves.ids(cuboid)
            fe, ve = np.bincount(ids, weights=f), np.bincount(ids, weights=v)
            scale = np.divide(ve, fe, out=np.ones_like(fe), where=fe > 0)
            gain = np.bincount(ids, weights=(v - f) ** 2 - (v - f * scale[ids]) ** 2)
            order = np.argsort(-gain)
            order = order[gain[order] > 0][:max_set]
            if len(order) == 0:
                continue
            score = 1 - np.sqrt(np.maximum(total - np.cumsum(gain[order]), 0) / total)
            reach = np.flatnonzero(score >= pt)
            if len(reach):
                m = int(reach[0]) + 1
                passing.append((m, float(score[m - 1]), cuboid, order[:m]))
            m = int(np.argmax(score)) + 1
            if best_overall is None or score[m - 1] > best_overall[0]:
                best_overall = (float(score[m - 1]), m, cuboid, order[:m])
        if passing:
            _, _, cuboid, eids = min(passing, key=lambda c: (c[0], -c[1]))
            return {leaves.element(cuboid, int(e)) for e in eids}
    if best_overall is None:
        return set()
    _, _, cuboid, eids = best_overall
    return {leaves.element(cuboid, int(e)) for e in eids}


def riskloc(leaves: Leaves, risk_threshold: float = 0.5, pep: float = 0.02, max_layer: int = 3) -> set[Element]:
    """RiskLoc: leaves are split at a cutoff mirrored from the deviation-score extremes into a
    normal and an abnormal partition, weighted by their distance from it. Layer by layer the
    element with the highest explanatory power whose risk (weighted abnormal share minus the
    relative ripple-effect misfit) reaches the threshold is a root cause; its leaves are
    removed and the search repeats while the abnormal part still carries ``pep`` of the
    explanatory power."""
    f, v = leaves.f, leaves.v
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.nan_to_num(2 * (f - v) / (f + v))
        ep = (v - f) / (v.sum() - f.sum())
    # The side whose 6th most extreme deviation is nearer zero is the normal one. (The paper
    # takes distinct values; with an exact forecast most normal leaves tie at 0, so here all
    # values count, and the side is decided by the comparison rather than the sign of -0.)
    ranked = np.sort(dev)
    low, high = ranked[min(5, len(dev) - 1)], ranked[max(len(dev) - 6, 0)]
    right = abs(low) <= abs(high)
    cutoff = -low if right else -high
    abnormal = dev > cutoff if right else dev < cutoff
    weight = np.where(abnormal, np.abs(dev), np.abs(cutoff - dev))
    weight = np.minimum(np.where((f == 0) & (v == 0), 0.0, weight), 1.0)
    if ep[abnormal].sum() < 0:
        ep = -ep
    threshold = pep * ep[abnormal].sum()
    both = (f != 0) & (v != 0)
    active = np.ones(len(f), dtype=bool)
    found: set[Element] = set()
    while ep[abnormal & active].sum() >= threshold:
        best: tuple[float, tuple[int, ...], int] | None = None
        for layer in range(1, max_layer + 1):
            for cuboid in leaves.cuboids(layer):
                ids = np.where(active, leaves.ids(cuboid), -1) + 1  # 0 collects removed leaves
                n = int(ids.max()) + 1

                def total(x: np.ndarray, ids: np.ndarray = ids, n: int = n) -> np.ndarray:
                    return np.bincount(ids, weights=x, minlength=n)

                ep_e = total(ep)
                w_abn, w_norm = total(weight * abnormal), total(weight * ~abnormal)
                high_risk = w_abn / (w_abn + w_norm + 1)
                fb, vb = total(f * both), total(v * both)
                ripple = f * np.divide(vb, fb, out=np.zeros_like(fb), where=fb > 0)[ids]
                with np.errstate(divide="ignore", invalid="ignore"):
                    misfit = np.nan_to_num(2 * (ripple - v) / (ripple + v))
                count = total(both.astype(float))
                mean_misfit = np.divide(total(np.abs(misfit) * both), count, out=np.zeros(n), where=count > 0)
                mean_dev = np.divide(total(np.abs(dev) * both), count, out=np.zeros(n), where=count > 0)
                low_risk = np.divide(mean_misfit, mean_dev, out=np.zeros(n), where=mean_dev > 0)
                ok = (total(abnormal.astype(float)) > 0) & (high_risk - low_risk >= risk_threshold)
                ok[0] = False
                ok &= ep_e > (best[0] if best else threshold)
                if ok.any():
                    e = int(np.argmax(np.where(ok, ep_e, -np.inf)))
                    best = (float(ep_e[e]), cuboid, e - 1)
            if best is not None:
                break
        if best is None:
            break
        _, cuboid, eid = best
        found.add(leaves.element(cuboid, eid))
        active &= leaves.ids(cuboid) != eid
    return found


def ours(case: RootCauseCase) -> set[Element]:
    result = attribute_change(case.leaves, case.dimensions, "predict", "real")
    return {frozenset((k, str(v)) for k, v in rc.element.items()) for rc in result.root_causes}


# ------------------------------------------------------------------------------------------
# Accuracy
# ------------------------------------------------------------------------------------------

METHODS: dict[str, Callable[[RootCauseCase], set[Element]]] = {
    "ours": ours,
    "RiskLoc": lambda case: riskloc(Leaves(case)),
    "HotSpot": lambda case: hotspot(Leaves(case)),
    "Adtributor": lambda case: adtributor(Leaves(case)),
}


def bench_accuracy(per_setting: int) -> dict[str, float]:
    """Micro-F1 tables per layer and per noise level; returns the overall F1 per method."""
    counts = {m: {} for m in METHODS}  # method -> group -> [tp, fp, fn]
    seconds: dict[str, list[float]] = {m: [] for m in METHODS}
    n_cases = 0
    for (ni, noise), layer, n_ele in itertools.product(enumerate(NOISE_LEVELS), (1, 2, 3), (1, 2, 3)):
        for i in range(per_setting):
            case = make_rca_case(7_000_000 + 10_000 * ni + 1_000 * layer + 100 * n_ele + i, layer, n_ele, noise)
            truth = {frozenset(e.items()) for e in case.root_causes}
            n_cases += 1
            for name, method in METHODS.items():
                start = time.perf_counter()
                predicted = method(case)
                seconds[name].append(time.perf_counter() - start)
                tally = np.array([len(predicted & truth), len(predicted - truth), len(truth - predicted)])
                for group in (f"L{layer}", f"{noise:.0%}", "all"):
                    counts[name][group] = counts[name].get(group, 0) + tally
    print(
        f"attribution: {n_cases} cases ({per_setting} per noise level x layer x element count), "
        f"{len(case.leaves):,} leaves each; micro-F1 (TP/FP/FN summed over cases)"
    )
    noise_cols = [f"{n:.0%}" for n in NOISE_LEVELS]
    header = f"{'method':<11}" + "".join(f"{c:>8}" for c in ["L1", "L2", "L3", "all", *noise_cols]) + "   s/case (mean / max)"
    print(header)
    for name in METHODS:
        row = [_f1(*counts[name][g]) for g in ["L1", "L2", "L3", "all", *noise_cols]]
        secs = seconds[name]
        print(f"{name:<11}" + "".join(f"{x:>8.3f}" for x in row) + f"   {np.mean(secs):.3f} / {np.max(secs):.3f}")
    for name in METHODS:
        tp, fp, fn = counts[name]["all"]
        print(f"  {name}: TP={tp} FP={fp} FN={fn}")
    return {name: _f1(*counts[name]["all"]) for name in METHODS}


# ------------------------------------------------------------------------------------------
# Speed
# ------------------------------------------------------------------------------------------


def _tool_args(path: str) -> dict[str, object]:
    return {"data_file": path, "dimensions": ["a", "b", "c", "d"], "baseline_column": "predict", "actual_column": "real"}


def bench_tool_and_cli() -> None:
    """One 20,000-leaf case through the tool in this process, and through the CLI."""
    case = make_rca_case(9_000_001, noise=0.1, root_causes=[{"a": "a2"}, {"a": "a3"}], magnitudes=[-1.0, -0.6])
    with tempfile.TemporaryDirectory() as data_dir:
        ctx = RunContext(thread_id="bench", data_dir=Path(data_dir), channel="cli", user="operator")
        csv = case.leaves.to_csv(index=False)
        asyncio.run(workspace_for(Path(data_dir), "bench").write("/data/case.csv", csv, overwrite=True))
        args = _tool_args("/data/case.csv")
        tool = AttributeChangeTool()
        timings = []
        for _ in range(3):
            start = time.perf_counter()
            result = asyncio.run(tool.run(AttributeChangeInput.model_validate(args), ctx))
            timings.append(time.perf_counter() - start)
        found = [rc.element for rc in result.root_causes]
        print(
            f"tool: attribute_change on a {len(case.leaves):,}-leaf CSV (parse + attribution), best of 3: "
            f"{min(timings):.2f} s; root causes {found} (injected a=a2 -> 0, a=a3 -60%)"
        )
        command = [str(ROOT / ".venv" / "bin" / "ba-agent"), "tool", "run", "attribute_change"]
        command += ["--thread", "bench", "--json", json.dumps(args)]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BA_DATA_DIR": data_dir})
        wall = time.perf_counter() - start
        elements = [rc["element"] for rc in json.loads(done.stdout)["root_causes"]] if done.returncode == 0 else done.stderr
        print(f"CLI: ba-agent tool run attribute_change (new process, same file): {wall:.2f} s wall; {elements}")


def bench_large_cube() -> None:
    rng = np.random.default_rng(7)
    cards = [10, 10, 10, 10, 20]
    grids = np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")
    frame = pd.DataFrame({chr(97 + d): g.ravel() for d, g in enumerate(grids)})
    base = rng.lognormal(3, 1.2, len(frame))
    frame["predict"] = base * (1 + rng.normal(0, 0.05, len(frame)))
    frame["real"] = base
    frame.loc[(frame["b"] == 3) & (frame["d"] == 7), "real"] *= 0.7
    start = time.perf_counter()
    result = attribute_change(frame, list("abcde"), "predict", "real")
    elapsed = time.perf_counter() - start
    print(
        f"runtime: attribute_change on {len(frame):,} leaves x 5 dims (layers 1-3): {elapsed:.2f} s, "
        f"root causes {[rc.element for rc in result.root_causes]} (injected b=3 & d=7, -30%)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case per setting, no large cube")
    parser.add_argument("--cases", type=int, default=4, help="cases per noise level x layer x element count")
    args = parser.parse_args()
    started = time.perf_counter()
    f1 = bench_accuracy(1 if args.quick else args.cases)
    bench_tool_and_cli()
    if not args.quick:
        bench_large_cube()
    print("anomaly detection: see bench/anomaly.py")
    summary = ", ".join(f"{name} {value:.3f}" for name, value in f1.items())
    print(f"SUMMARY attribution micro-F1: {summary}; total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
