"""Benchmark of the analytics core (prints figures; it is a benchmark, not a test).

Run from the project root:  .venv/bin/python bench/analytics.py [--quick]

* Attribution: semi-synthetic root-cause cases (agent_core.analytics.synthetic), N per layer
  1-3 -> micro-F1 on exact root-cause elements per layer and overall, seconds per case. Once
  with the default forecast noise (1-5 %), once with noisier forecasts (5-25 %, the range of
  RiskLoc's generator) to show how accuracy degrades.
* Anomalies: labelled daily KPI and minute-level series -> event-level precision / recall (an
  event is detected when a reported onset falls in its true window widened by a tolerance),
  NAB-style score (standard profile) and false alarms on clean series.
* Runtime on 1M-row inputs: attribution over 1M leaves (5 dimensions), anomaly detection over
  1,000 segments x 1,000 daily points, and over one series of 1M minute points.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_core.analytics import attribute_change, detect_anomalies  # noqa: E402
from agent_core.analytics.synthetic import (  # noqa: E402
    LabelledSeries,
    make_daily_kpi_series,
    make_minute_series,
    make_root_cause_case,
)

# NAB "standard" application profile.
NAB_TP, NAB_FP, NAB_FN = 1.0, 0.11, 1.0


def _element_key(element: dict) -> frozenset:
    return frozenset((k, str(v)) for k, v in element.items())


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


# ------------------------------------------------------------------------------------------
# Attribution
# ------------------------------------------------------------------------------------------


def bench_attribution(per_layer: int, noise_range: tuple[float, float], label: str) -> float:
    """Micro-F1 per layer and overall; returns the overall F1."""
    totals = np.zeros(3, dtype=int)
    seconds: list[float] = []
    for layer in (1, 2, 3):
        counts = np.zeros(3, dtype=int)
        for i in range(per_layer):
            case = make_root_cause_case(10_000 * layer + i, layer=layer, noise_range=noise_range)
            start = time.perf_counter()
            result = attribute_change(case.leaves, case.dimensions, "predict", "real")
            seconds.append(time.perf_counter() - start)
            predicted = {_element_key(rc.element) for rc in result.root_causes}
            truth = {_element_key(e) for e in case.root_causes}
            counts += [len(predicted & truth), len(predicted - truth), len(truth - predicted)]
        totals += counts
        print(
            f"attribution[{label}] layer {layer}: F1={_f1(*counts):.3f} "
            f"(tp={counts[0]} fp={counts[1]} fn={counts[2]}, {per_layer} cases)"
        )
    overall = _f1(*totals)
    print(
        f"attribution[{label}] overall: F1={overall:.3f}  "
        f"s/case mean={np.mean(seconds):.3f} max={np.max(seconds):.3f}"
    )
    return overall


# ------------------------------------------------------------------------------------------
# Anomalies
# ------------------------------------------------------------------------------------------


def _scaled_sigmoid(y: float) -> float:
    return 2.0 / (1.0 + math.exp(5.0 * y)) - 1.0


@dataclass
class _Tally:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    nab_raw: float = 0.0
    nab_null: float = 0.0
    nab_perfect: float = 0.0
    seconds: float = 0.0
    series: int = 0

    def add(self, series: LabelledSeries, onsets: list[pd.Timestamp], tol: pd.Timedelta) -> None:
        """Event-level matching and NAB scoring of one series' reported onsets."""
        windows = [(w.start - tol, w.end + tol) for w in series.windows]
        detected = [False] * len(windows)
        for onset in sorted(onsets):
            inside = [i for i, (s, e) in enumerate(windows) if s <= onset <= e]
            if inside:
                i = inside[0]
                if not detected[i]:  # NAB counts only the earliest detection in a window
                    detected[i] = True
                    s, e = windows[i]
                    y = (onset - e) / (e - s)
                    self.nab_raw += NAB_TP * _scaled_sigmoid(y)
                continue
            self.fp += 1
            before = [(s, e) for s, e in windows if e < onset]
            if before:  # a false alarm just after a window costs less than one out of the blue
                s, e = before[-1]
                self.nab_raw += NAB_FP * _scaled_sigmoid((onset - e) / (e - s))
            else:
                self.nab_raw -= NAB_FP
        self.tp += sum(detected)
        self.fn += len(windows) - sum(detected)
        self.nab_raw -= NAB_FN * (len(windows) - sum(detected))
        self.nab_null -= NAB_FN * len(windows)
        self.nab_perfect += NAB_TP * _scaled_sigmoid(-1.0) * len(windows)
        self.series += 1

    def nab_score(self) -> float:
        span = self.nab_perfect - self.nab_null
        return 100.0 * (self.nab_raw - self.nab_null) / span if span else 100.0


def bench_anomalies(kind: str, n_series: int, n_clean: int) -> tuple[float, float]:
    """Precision/recall/NAB on labelled series plus false alarms on clean ones."""
    make = make_daily_kpi_series if kind == "daily" else make_minute_series
    tol = pd.Timedelta(days=1) if kind == "daily" else pd.Timedelta(minutes=5)
    tally = _Tally()
    for seed in range(n_series):
        series = make(seed)
        start = time.perf_counter()
        report = detect_anomalies(series.frame, "timestamp", "value", holidays=series.holidays)
        tally.seconds += time.perf_counter() - start
        tally.add(series, [pd.Timestamp(a.timestamp) for a in report.anomalies], tol)
    clean_alarms = 0
    for seed in range(n_clean):
        series = make(50_000 + seed, n_anomalies=0)
        report = detect_anomalies(series.frame, "timestamp", "value", holidays=series.holidays)
        clean_alarms += len(report.anomalies)
    precision = tally.tp / max(1, tally.tp + tally.fp)
    recall = tally.tp / max(1, tally.tp + tally.fn)
    points = len(series.frame)
    print(
        f"anomalies[{kind}]: {n_series} series x {points} points, "
        f"{tally.tp + tally.fn} true events: precision={precision:.3f} recall={recall:.3f} "
        f"F1={_f1(tally.tp, tally.fp, tally.fn):.3f} NAB(standard)={tally.nab_score():.1f} "
        f"s/series={tally.seconds / n_series:.3f}"
    )
    print(f"anomalies[{kind}]: clean series: {clean_alarms} false alarm(s) in {n_clean} series")
    return precision, recall


# ------------------------------------------------------------------------------------------
# Runtime at 1M rows
# ------------------------------------------------------------------------------------------


def bench_runtime_attribution() -> None:
    rng = np.random.default_rng(7)
    cards = [10, 10, 10, 10, 100]
    grids = np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")
    frame = pd.DataFrame({chr(97 + d): g.ravel() for d, g in enumerate(grids)})
    base = rng.lognormal(3, 1.2, len(frame))
    frame["predict"] = base * (1 + rng.normal(0, 0.03, len(frame)))
    frame["real"] = base
    cause = (frame["b"] == 3) & (frame["d"] == 7)
    frame.loc[cause, "real"] *= 0.7
    start = time.perf_counter()
    result = attribute_change(frame, list("abcde"), "predict", "real")
    elapsed = time.perf_counter() - start
    found = [rc.element for rc in result.root_causes]
    print(
        f"runtime: attribute_change on {len(frame):,} leaves x 5 dims (layers 1-3): "
        f"{elapsed:.2f} s, root causes {found} (injected b=3 & d=7)"
    )


def bench_runtime_anomalies() -> None:
    rng = np.random.default_rng(8)
    days = pd.date_range("2022-01-01", periods=1_000, freq="D")
    n_seg = 1_000
    weekly = np.tile([1.0, 1.02, 1.03, 1.05, 1.1, 0.82, 0.78], 150)[: len(days)]
    level = rng.uniform(1_000, 50_000, n_seg)[:, None] * weekly[None, :]
    values = level * (1 + rng.normal(0, 0.03, (n_seg, len(days))))
    frame = pd.DataFrame(
        {
            "segment": np.repeat([f"s{i:04d}" for i in range(n_seg)], len(days)),
            "timestamp": np.tile(days, n_seg),
            "value": values.ravel(),
        }
    )
    start = time.perf_counter()
    report = detect_anomalies(frame, "timestamp", "value", segment_column="segment")
    elapsed = time.perf_counter() - start
    print(
        f"runtime: detect_anomalies on {n_seg:,} segments x {len(days):,} daily points "
        f"({len(frame):,} rows): {elapsed:.2f} s, {len(report.anomalies)} alarm(s) on clean data"
    )

    n = 1_000_000
    minutes = pd.date_range("2023-01-01", periods=n, freq="min")
    phase = np.arange(n) % 1440
    expected = 300 * (1 + 0.6 * np.sin(2 * np.pi * (phase - 480) / 1440))
    series = pd.DataFrame({"timestamp": minutes, "value": rng.normal(expected, np.sqrt(expected))})
    series.loc[500_000:500_029, "value"] *= 0.3  # a 30-minute outage
    start = time.perf_counter()
    report = detect_anomalies(series, "timestamp", "value")
    elapsed = time.perf_counter() - start
    onsets = [str(a.timestamp) for a in report.anomalies]
    print(
        f"runtime: detect_anomalies on one series of {n:,} minute points: {elapsed:.2f} s, "
        f"{len(onsets)} event(s) {onsets[:3]} (injected outage at {minutes[500_000]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cases, no 1M-row runs")
    args = parser.parse_args()
    started = time.perf_counter()
    per_layer = 10 if args.quick else 30
    f1 = bench_attribution(per_layer, (0.01, 0.05), "noise 1-5%")
    f1_noisy = bench_attribution(per_layer, (0.05, 0.25), "noise 5-25%")
    daily = bench_anomalies("daily", 20 if args.quick else 60, 20 if args.quick else 100)
    minute = bench_anomalies("minute", 5 if args.quick else 20, 5 if args.quick else 20)
    if not args.quick:
        bench_runtime_attribution()
        bench_runtime_anomalies()
    print(
        f"SUMMARY attribution F1={f1:.3f} (noisy {f1_noisy:.3f}); "
        f"anomalies daily P/R={daily[0]:.2f}/{daily[1]:.2f}, "
        f"minute P/R={minute[0]:.2f}/{minute[1]:.2f}; "
        f"total {time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    main()
