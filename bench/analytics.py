"""Benchmark of root-cause attribution (prints figures; it is a benchmark, not a test).

Run from the project root:  .venv/bin/python bench/analytics.py [--quick] [--cases N] [--data DIR]

* Accuracy on the published benchmark: the development split of Squeeze's B0 (Li et al.,
  ISSRE 2019; the set RiskLoc, Squeeze, AutoRoot, HotSpot and Adtributor report on): the first
  20 cases of each of its 9 settings ``B_cuboid_layer_L_n_ele_N``, 21,600 leaves each, read from
  ``--data`` (default: ``shared/datasets/squeeze-b0-dev`` beside the checkout). Scored as the
  papers score it: micro-F1 over exact elements (a parent or child of a true root cause is one
  false positive and one false negative), TP/FP/FN summed over cases, per setting, per layer and
  overall, with seconds per case. Beside it, RiskLoc (Kalander 2023) implemented here from its
  paper on the same cases: deviation scores, the cutoff mirrored from the deviation extremes,
  the weighted risk partition, risk = weighted abnormal share - relative ripple-effect misfit,
  layer-by-layer cuboid search by explanatory power with layer-1 element pruning, repeated on
  the leaves left while the abnormal part carries ``pep`` of the explanatory power.
* Second line, labelled as such: the project's own generator of cases in that construction
  (``agent_core.analytics.rca_benchmark``, 20,000 leaves, forecast noise 0-25 %), where
  HotSpot and Adtributor run too (``--synthetic N`` cases per noise level x layer x element
  count; 0 skips it).
* Speed on a B0 case: ``attribute_change`` as the tool runs it (``AttributeChangeTool.run`` on
  the case's CSV in the workspace: parse + attribution) and through the CLI
  (``ba-agent tool run attribute_change``, a new process, wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent_core.analytics.attribution import attribute_change  # noqa: E402
from agent_core.analytics.rca_benchmark import NOISE_LEVELS, make_rca_case  # noqa: E402
from agent_core.run_context import RunContext  # noqa: E402
from agent_core.tools.analytics_tools import AttributeChangeInput, AttributeChangeTool  # noqa: E402
from agent_core.workspace.local import workspace_for  # noqa: E402

Element = frozenset[tuple[str, str]]
SETTINGS = [f"B_cuboid_layer_{layer}_n_ele_{n}" for layer in (1, 2, 3) for n in (1, 2, 3)]
PUBLISHED = "published on all of B0: RiskLoc 0.961, Squeeze 0.949, AutoRoot 0.91, HotSpot 0.55, Adtributor 0.16"


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


def _element(text: str) -> Element:
    """``b=b21&c=c1`` as a set of (dimension, value) pairs."""
    return frozenset(tuple(part.split("=", 1)) for part in text.split("&"))  # type: ignore[misc]


@dataclass(frozen=True)
class Case:
    setting: str
    layer: int
    leaves: pd.DataFrame  # dimension columns, real, predict
    dimensions: list[str]
    truth: set[Element]


# ------------------------------------------------------------------------------------------
# Methods: ours, and the baselines implemented from their papers on integer-coded leaves
# ------------------------------------------------------------------------------------------


class Leaves:
    """A case's leaves as integer codes, with per-cuboid element ids."""

    def __init__(self, case: Case) -> None:
        self.dims = case.dimensions
        factorized = [pd.factorize(case.leaves[d]) for d in self.dims]
        self.codes = np.stack([codes for codes, _ in factorized], axis=1)
        self.labels = [np.asarray(labels, dtype=object) for _, labels in factorized]
        self.cards = [len(labels) for labels in self.labels]
        self.f = case.leaves["predict"].to_numpy(dtype=float)
        self.v = case.leaves["real"].to_numpy(dtype=float)

    def ids(self, cuboid: tuple[int, ...]) -> np.ndarray:
        return np.ravel_multi_index(tuple(self.codes[:, d] for d in cuboid), [self.cards[d] for d in cuboid])

    def size(self, cuboid: tuple[int, ...]) -> int:
        return int(np.prod([self.cards[d] for d in cuboid]))

    def element(self, cuboid: tuple[int, ...], eid: int) -> Element:
        values = np.unravel_index(eid, [self.cards[d] for d in cuboid])
        return frozenset((self.dims[d], str(self.labels[d][int(v)])) for d, v in zip(cuboid, values, strict=True))

    def cuboids(self, layer: int) -> list[tuple[int, ...]]:
        return list(itertools.combinations(range(len(self.dims)), layer))


def riskloc(leaves: Leaves, risk_threshold: float = 0.5, pep: float = 0.02, n_remove: int = 5) -> set[Element]:
    """RiskLoc (Kalander 2023), defaults as published (risk 0.5, pep 0.02, element pruning).

    Deviation ``d = 2 (f - v) / (f + v)``. The cutoff is mirrored from the extremes: of the
    ``n_remove + 1``-th smallest and largest distinct deviations, the one nearer zero, negated;
    leaves beyond it (on the other side) form the abnormal partition. Weights: ``|d|`` in the
    abnormal partition, the distance to the cutoff in the normal one (0 for empty leaves),
    capped at 1. An element's risk is its weighted abnormal share ``A / (A + N + 1)`` minus
    the relative misfit of the ripple effect (the mean |deviation| of its leaves from their
    forecast scaled to the element's actual total, over their mean |d|). Layer by layer, the
    element of the highest explanatory power (above ``pep`` of the abnormal partition's,
    holding an abnormal leaf) whose risk reaches the threshold is a root cause; its leaves are
    removed and the search repeats while the abnormal leaves left carry ``pep`` of it.
    Element pruning: layer-1 elements without abnormal leaves or explanatory power are left
    out of the deeper cuboids that contain them."""
    f, v = leaves.f, leaves.v
    with np.errstate(divide="ignore", invalid="ignore"):
        dev = np.nan_to_num(2 * (f - v) / (f + v))
    ep = (v - f) / (v.sum() - f.sum())
    distinct = np.unique(dev)
    low = distinct[: n_remove + 1].max()
    high = distinct[-(n_remove + 1) :].min()
    cutoff = -min(low, high, key=abs)
    right = np.copysign(1.0, cutoff) > 0
    abnormal = dev > cutoff if right else dev < cutoff
    weight = np.where((f == 0) & (v == 0), 0.0, np.abs(cutoff - dev))
    weight = np.minimum(np.where(abnormal, np.abs(dev), weight), 1.0)
    if ep[abnormal].sum() < 0:
        ep = -ep
    threshold = pep * ep[abnormal].sum()
    ep_pos = np.maximum(ep, 0.0)
    both = (f != 0) & (v != 0)
    active = np.ones(len(f), dtype=bool)
    n_dims = len(leaves.dims)
    pruned = [np.zeros(len(f), dtype=bool) for _ in range(n_dims)]  # leaves of pruned layer-1 elements
    found: set[Element] = set()
    while ep[abnormal & active].sum() >= threshold:
        best: tuple[float, tuple[int, ...], int] | None = None
        for layer in range(1, n_dims + 1):
            for cuboid in leaves.cuboids(layer):
                keep = active.copy()
                for d in cuboid:
                    keep &= ~pruned[d]
                ids = np.where(keep, leaves.ids(cuboid), -1) + 1  # 0 collects the left-out leaves
                n = leaves.size(cuboid) + 1

                def total(x: np.ndarray, ids: np.ndarray = ids, n: int = n) -> np.ndarray:
                    return np.bincount(ids, weights=x, minlength=n)

                ep_e, n_abnormal = total(ep), total(abnormal.astype(float))
                if layer == 1:
                    drop = (total(ep_pos) < threshold) | (n_abnormal == 0)
                    drop[0] = False
                    pruned[cuboid[0]] |= drop[ids]
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
                ok = (n_abnormal > 0) & (high_risk - low_risk >= risk_threshold)
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


def adtributor(leaves: Leaves, t_ep: float = 0.1, t_eep: float = 0.67, k: int = 3) -> set[Element]:
    """Adtributor (Bhagwan et al., NSDI 2014): per dimension, elements by surprise (Jensen-
    Shannon term of forecast vs actual share) with explanatory power above T_EP are added
    until they explain T_EEP of the change; the k most surprising dimensions' sets."""
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
                candidates.append((float(surprise[chosen].sum()), {leaves.element((d,), c) for c in chosen}))
                break
    candidates.sort(key=lambda c: -c[0])
    return set().union(*[elements for _, elements in candidates[:k]])


def hotspot(leaves: Leaves, pt: float = 0.67, max_layer: int = 3, max_set: int = 10) -> set[Element]:
    """HotSpot (Sun et al., IEEE Access 2018): the potential score of a set of elements of one
    cuboid is 1 - |v - a| / |v - f| with ``a`` the ripple-effect values. It is additive over
    a cuboid's elements, so the best set of each size is the top elements (an exact search in
    place of the MCTS); layer by layer, the smallest set reaching ``pt``, else the best set."""
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


def ours(case: Case) -> set[Element]:
    result = attribute_change(case.leaves, case.dimensions, "predict", "real")
    return {frozenset((k, str(v)) for k, v in rc.element.items()) for rc in result.root_causes}


METHODS: dict[str, Callable[[Case], set[Element]]] = {
    "ours": ours,
    "RiskLoc": lambda case: riskloc(Leaves(case)),
    "HotSpot": lambda case: hotspot(Leaves(case)),
    "Adtributor": lambda case: adtributor(Leaves(case)),
}


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------


def default_data_dir() -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent):
        path = base / "shared" / "datasets" / "squeeze-b0-dev"
        if path.is_dir():
            return path
    return None


def b0_cases(data: Path, per_setting: int) -> list[Case]:
    cases = []
    for setting in SETTINGS:
        folder = data / setting
        labels = pd.read_csv(folder / "injection_info.csv")
        truth = {int(ts): str(text) for ts, text in zip(labels["timestamp"], labels["set"], strict=True)}
        files = sorted(folder.glob("*.csv.gz"), key=lambda p: int(p.name.split(".")[0]))[:per_setting]
        for path in files:
            with gzip.open(path, "rt") as handle:
                leaves = pd.read_csv(handle, dtype={"a": str, "b": str, "c": str, "d": str})
            dims = sorted(c for c in leaves.columns if c not in ("real", "predict"))
            elements = {_element(e) for e in truth[int(path.name.split(".")[0])].split(";")}
            cases.append(Case(setting, int(setting.split("_")[3]), leaves, dims, elements))
    return cases


def synthetic_cases(per_setting: int) -> list[Case]:
    cases = []
    for (ni, noise), layer, n_ele in itertools.product(enumerate(NOISE_LEVELS), (1, 2, 3), (1, 2, 3)):
        for i in range(per_setting):
            case = make_rca_case(7_000_000 + 10_000 * ni + 1_000 * layer + 100 * n_ele + i, layer, n_ele, noise)
            truth = {frozenset(e.items()) for e in case.root_causes}
            cases.append(Case(f"noise {noise:.0%}", layer, case.leaves, case.dimensions, truth))
    return cases


# ------------------------------------------------------------------------------------------
# Scoring
# ------------------------------------------------------------------------------------------


def score(cases: list[Case], methods: list[str]) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, list[float]]]:
    counts: dict[str, dict[str, np.ndarray]] = {m: {} for m in methods}
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    for case in cases:
        for name in methods:
            start = time.process_time()
            predicted = METHODS[name](case)
            seconds[name].append(time.process_time() - start)
            tally = np.array([len(predicted & case.truth), len(predicted - case.truth), len(case.truth - predicted)])
            for group in (case.setting, f"layer {case.layer}", "all"):
                counts[name][group] = counts[name].get(group, np.zeros(3, dtype=int)) + tally
    return counts, seconds


def print_table(title: str, groups: list[str], counts: dict[str, dict[str, np.ndarray]], seconds: dict[str, list[float]]) -> None:
    methods = list(counts)
    print(title)
    print(f"  {'':<26}" + "".join(f"{m:>22}" for m in methods))
    for group in groups:
        cells = []
        for m in methods:
            tp, fp, fn = counts[m].get(group, np.zeros(3, dtype=int))
            cells.append(f"{_f1(tp, fp, fn):.3f} ({tp:>3}/{fp:>3}/{fn:>3})")
        print(f"  {group:<26}" + "".join(f"{c:>22}" for c in cells))
    times = "".join(f"{np.mean(seconds[m]):>13.3f} / {np.max(seconds[m]):.3f}" for m in methods)
    print(f"  {'CPU s/case mean / max':<26}" + times)
    print("  (F1 (TP/FP/FN), micro-averaged over exact elements)")


# ------------------------------------------------------------------------------------------
# Speed through the tool and the CLI
# ------------------------------------------------------------------------------------------


def bench_tool_and_cli(case: Case, rounds: int) -> None:
    """One B0 case through the tool in this process (parse + attribution), and the CLI."""
    args = {"data_file": "/data/case.csv", "dimensions": case.dimensions, "baseline_column": "predict", "actual_column": "real"}
    with tempfile.TemporaryDirectory() as data_dir:
        ctx = RunContext(thread_id="bench", data_dir=Path(data_dir), channel="cli", user="operator")
        csv = case.leaves.to_csv(index=False)
        asyncio.run(workspace_for(Path(data_dir), "bench").write("/data/case.csv", csv, overwrite=True))
        tool = AttributeChangeTool()
        timings, cpu = [], []
        for _ in range(rounds):
            start, start_cpu = time.perf_counter(), time.process_time()
            result = asyncio.run(tool.run(AttributeChangeInput.model_validate(args), ctx))
            timings.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        found = sorted("&".join(f"{k}={v}" for k, v in rc.element.items()) for rc in result.root_causes)
        truth = sorted("&".join(f"{k}={v}" for k, v in sorted(e)) for e in case.truth)
        print(
            f"tool: attribute_change on a B0 case ({case.setting}, {len(case.leaves):,} leaves, CSV parse + "
            f"attribution), {rounds} runs: median {np.median(timings):.2f} s wall, {np.median(cpu):.2f} s CPU; "
            f"found {found}, truth {truth}"
        )
        command = [str(ROOT / ".venv" / "bin" / "ba-agent"), "tool", "run", "attribute_change"]
        command += ["--thread", "bench", "--json", json.dumps(args)]
        walls, cpus = [], []
        for _ in range(rounds):
            start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "BA_DATA_DIR": data_dir})
            walls.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        ok = done.returncode == 0 and sorted(
            "&".join(f"{k}={v}" for k, v in rc["element"].items()) for rc in json.loads(done.stdout)["root_causes"]
        ) == found
        print(
            f"CLI: ba-agent tool run attribute_change (new process, same file), {rounds} runs: median "
            f"{np.median(walls):.2f} s wall, {np.median(cpus):.2f} s CPU; {'same answer' if ok else done.stderr[-300:]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data_dir(), help="the squeeze-b0-dev folder")
    parser.add_argument("--cases", type=int, default=20, help="B0 cases per setting (the dev split has 20)")
    parser.add_argument("--synthetic", type=int, default=1, help="own-generator cases per noise x layer x count (0: none)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of the tool and of the CLI")
    parser.add_argument("--quick", action="store_true", help="3 B0 cases per setting, no own-generator line, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.cases, args.synthetic, args.rounds = 3, 0, 1
    if args.data is None or not args.data.is_dir():
        parser.error("the B0 development split was not found; give --data DIR (the squeeze-b0-dev folder)")
    started = time.perf_counter()
    load = os.getloadavg()[0]
    if load > (os.cpu_count() or 1):
        print(f"note: load average {load:.1f} on {os.cpu_count()} CPUs; wall times are inflated, CPU times less so")
    cases = b0_cases(args.data, args.cases)
    counts, seconds = score(cases, ["ours", "RiskLoc"])
    print_table(
        f"Squeeze B0, development split ({len(cases)} cases, {args.cases} per setting; {PUBLISHED}):",
        [*SETTINGS, "layer 1", "layer 2", "layer 3", "all"],
        counts,
        seconds,
    )
    if args.synthetic:
        synthetic = synthetic_cases(args.synthetic)
        s_counts, s_seconds = score(synthetic, list(METHODS))
        print_table(
            f"Own generator (agent_core.analytics.rca_benchmark, not the published benchmark; {len(synthetic)} cases):",
            [*(f"noise {n:.0%}" for n in NOISE_LEVELS), "layer 1", "layer 2", "layer 3", "all"],
            s_counts,
            s_seconds,
        )
    bench_tool_and_cli(cases[-1], args.rounds)
    f1 = {m: _f1(*counts[m]["all"]) for m in counts}
    worst = min(_f1(*counts["ours"][s]) for s in SETTINGS if s in counts["ours"])
    print(
        f"SUMMARY attribution micro-F1 on the B0 dev split: ours {f1['ours']:.3f} (worst setting {worst:.3f}, "
        f"{np.mean(seconds['ours']):.2f} s/case), RiskLoc {f1['RiskLoc']:.3f} ({np.mean(seconds['RiskLoc']):.2f} s/case); "
        f"total {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
