"""Anomaly detection: behaviour on small generated series, causality, and the NAB scorer of
bench/anomaly.py on hand-made cases."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent_core.analytics.anomaly import AnomalyReport, detect_anomalies
from agent_core.analytics.anomaly_score import anomaly_scores
from agent_core.analytics.synthetic import make_daily_kpi_series, make_minute_series

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_anomaly", ROOT / "bench" / "anomaly.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _five_minute_daily(days: int, noise: float, seed: int = 0) -> pd.DataFrame:
    """A daily cycle sampled every 5 minutes (low at night, high by day), Gaussian noise."""
    rng = np.random.default_rng(seed)
    times = pd.date_range("2024-04-01", periods=days * 288, freq="5min")
    phase = np.arange(len(times)) % 288
    cycle = 50 + 30 * np.sin(2 * np.pi * (phase - 72) / 288)
    return pd.DataFrame({"timestamp": times, "value": cycle + rng.normal(0, noise, len(times))})


def _events(frame: pd.DataFrame, **kwargs) -> list:
    return detect_anomalies(frame, "timestamp", "value", **kwargs).anomalies


# --- no anomaly, no event ----------------------------------------------------------------------


def test_perfect_square_wave_raises_no_events() -> None:
    times = pd.date_range("2024-04-01", periods=14 * 288, freq="5min")
    hour = (np.arange(len(times)) % 288) / 12
    frame = pd.DataFrame({"timestamp": times, "value": np.where((hour >= 9) & (hour < 18), 80.0, 20.0)})
    assert _events(frame) == []


def test_noise_free_daily_cycle_raises_no_events() -> None:
    assert _events(_five_minute_daily(14, noise=0.0)) == []


def test_flat_series_raises_nothing_until_it_moves() -> None:
    times = pd.date_range("2024-04-01", periods=3 * 288, freq="5min")
    values = np.full(len(times), 45.0)
    flat = pd.DataFrame({"timestamp": times, "value": values})
    assert _events(flat) == []
    assert np.all(anomaly_scores(times, values).score == 0)
    values = values.copy()
    values[700:] = 60.0
    (event,) = _events(pd.DataFrame({"timestamp": times, "value": values}))
    assert event.timestamp == times[700] and event.direction == "spike"


@pytest.mark.parametrize("seed", range(3))
def test_clean_seasonal_series_raise_very_few_events(seed: int) -> None:
    """At the default sensitivity at most about one false alarm per 2,000 points (the
    NAB-optimal threshold tolerates some); at "low" sensitivity none."""
    for frame in (
        _five_minute_daily(10, noise=3.0, seed=seed),
        make_daily_kpi_series(seed, n_anomalies=0, with_holidays=False).frame,
        make_minute_series(seed, n_anomalies=0).frame,
    ):
        assert len(_events(frame)) <= 1 + len(frame) // 2000
        assert _events(frame, sensitivity="low") == []


def test_weekends_of_a_weekly_cycle_are_learnt() -> None:
    """Hourly demand with a daily and a weekly cycle (weekends at 40 %), six weeks: the very
    first weekend is news to a causal detector, later ones are not."""
    rng = np.random.default_rng(4)
    times = pd.date_range("2024-01-01", periods=6 * 7 * 24, freq="h")
    daily = 1 + 0.5 * np.sin(2 * np.pi * (times.hour.to_numpy() - 6) / 24)
    weekend = times.day_of_week.to_numpy() >= 5
    values = 1000 * daily * np.where(weekend, 0.4, 1.0) * (1 + rng.normal(0, 0.03, len(times)))
    events = _events(pd.DataFrame({"timestamp": times, "value": values}))
    later = [e for e in events if e.timestamp >= times[14 * 24]]
    assert not any(pd.Timestamp(e.timestamp).day_of_week >= 5 for e in later), events
    assert len(later) <= 1


# --- anomalies are found at their onset --------------------------------------------------------


def test_spike_in_a_seasonal_series_found_at_onset() -> None:
    frame = _five_minute_daily(8, noise=2.0, seed=1)
    onset = 6 * 288 + 100
    frame.loc[onset : onset + 5, "value"] += 40
    events = _events(frame)
    assert [e.timestamp for e in events] == [frame["timestamp"][onset]]
    assert events[0].direction == "spike" and events[0].value > events[0].upper


def test_missing_daily_peak_is_found() -> None:
    """The daytime rise does not happen one day: only the daily cycle makes it unusual."""
    frame = _five_minute_daily(8, noise=2.0, seed=2)
    day = 6 * 288
    frame.loc[day + 100 : day + 200, "value"] = 50 + np.random.default_rng(0).normal(0, 2, 101)
    events = _events(frame)
    onset = pd.Timestamp(events[0].timestamp)
    assert frame["timestamp"][day + 100] <= onset <= frame["timestamp"][day + 130]
    assert events[0].direction == "drop"
    # at most the return to normal may be flagged too, on the same day
    assert len(events) <= 2 and all(e.timestamp.date() == onset.date() for e in events)


def test_level_shift_reported_once_near_onset() -> None:
    frame = _five_minute_daily(10, noise=2.0, seed=3)
    onset = 5 * 288 + 50
    frame.loc[onset:, "value"] += 25
    events = _events(frame)
    assert len(events) == 1, [e.timestamp for e in events]
    assert abs(pd.Timestamp(events[0].timestamp) - frame["timestamp"][onset]) <= pd.Timedelta("15min")
    assert events[0].kind == "level_shift" and events[0].direction == "spike"


def test_daily_kpi_drop_found_with_expected_value() -> None:
    series = make_daily_kpi_series(11, n_anomalies=0, with_holidays=False)
    frame = series.frame.copy()
    frame.loc[80:82, "value"] *= 0.5
    events = _events(frame)
    assert [e.timestamp for e in events] == [frame["timestamp"][80]]
    event = events[0]
    assert event.direction == "drop" and event.value < 0.6 * event.expected
    assert event.lower < event.expected < event.upper and event.timestamp <= event.peak <= event.end


def _daily_spike_with_jitter(days: int, seed: int = 7) -> pd.DataFrame:
    """The daily cycle plus, every day around 03:00 (+-40 minutes, at random), a one-row
    spike of about +40 (20 noise scales): a nightly job, say."""
    frame = _five_minute_daily(days, noise=2.0, seed=seed)
    rng = np.random.default_rng(seed)
    for day in range(days):
        row = day * 288 + 36 + int(rng.integers(-8, 9))
        frame.loc[row, "value"] += 40 + rng.uniform(-5, 5)
    return frame


def test_recurring_daily_spike_with_jittered_time_is_learnt() -> None:
    """A spike that comes back every night at about the same time stops being reported once
    it has been seen on the previous nights, though it never falls on the same 5-minute row;
    the same spike at another time of day is still found at once."""
    frame = _daily_spike_with_jitter(10)
    elsewhere = 8 * 288 + 180  # day 9, 15:00
    frame.loc[elsewhere, "value"] += 40
    events = _events(frame)
    nightly = [
        e.timestamp
        for e in events
        if e.timestamp >= pd.Timestamp("2024-04-05") and 1 <= e.timestamp.hour <= 4
    ]
    assert nightly == []
    assert frame["timestamp"][elsewhere] in [e.timestamp for e in events]


# --- causality, sampling, bookkeeping -----------------------------------------------------------


def test_scores_are_causal() -> None:
    frame = _five_minute_daily(6, noise=2.0, seed=5)
    frame.loc[1200:1210, "value"] -= 30
    full = anomaly_scores(frame["timestamp"], frame["value"])
    for cut in (200, 900, 1205, 1500):
        prefix = anomaly_scores(frame["timestamp"][:cut], frame["value"][:cut])
        np.testing.assert_array_equal(prefix.score, full.score[:cut])
        np.testing.assert_array_equal(prefix.raw, full.raw[:cut])
    report = detect_anomalies(frame, "timestamp", "value")
    early = detect_anomalies(frame[:1300], "timestamp", "value")
    assert [e.timestamp for e in early.anomalies] == [e.timestamp for e in report.anomalies]


def test_seasonal_envelope_is_causal() -> None:
    """Appending later rows, even an anomaly at the phase the envelope looks back to, changes
    no earlier score."""
    frame = _daily_spike_with_jitter(7, seed=11)
    frame.loc[6 * 288 + 36, "value"] += 200
    full = anomaly_scores(frame["timestamp"], frame["value"])
    for cut in (3 * 288 + 30, 4 * 288 + 40, 6 * 288 + 36):
        prefix = anomaly_scores(frame["timestamp"][:cut], frame["value"][:cut])
        np.testing.assert_array_equal(prefix.score, full.score[:cut])
        np.testing.assert_array_equal(prefix.raw, full.raw[:cut])


def test_irregular_sampling_scores_only_real_observations() -> None:
    frame = _five_minute_daily(8, noise=2.0, seed=6)
    onset = 6 * 288 + 150
    frame.loc[onset : onset + 3, "value"] += 45
    keep = np.random.default_rng(1).random(len(frame)) > 0.4
    keep[onset] = True
    sparse = frame[keep].reset_index(drop=True)
    report = detect_anomalies(sparse, "timestamp", "value")
    assert report.series[0].n_points == len(sparse) and report.series[0].n_imputed == 0
    assert [e.timestamp for e in report.anomalies] == [frame["timestamp"][onset]]


def test_holidays_are_left_out_and_report_from_limits_reporting() -> None:
    series = make_daily_kpi_series(12, n_anomalies=0, with_holidays=False)
    frame = series.frame.copy()
    frame.loc[[50, 90], "value"] *= 2.0
    days = frame["timestamp"]
    assert [e.timestamp for e in _events(frame)] == [days[50], days[90]]
    assert [e.timestamp for e in _events(frame, holidays=[days[50].date()])] == [days[90]]
    assert [e.timestamp for e in _events(frame, report_from=days[60])] == [days[90]]


def test_segments_duplicates_and_short_series() -> None:
    east = make_daily_kpi_series(9, n_anomalies=0, with_holidays=False).frame.assign(region="East")
    west = make_daily_kpi_series(10, n_anomalies=0, with_holidays=False).frame.assign(region="West")
    west.loc[70, "value"] *= 0.4
    frame = pd.concat([east, west], ignore_index=True)
    report = detect_anomalies(frame, "timestamp", "value", segment_column="region", sensitivity="low")
    assert [(a.segment, a.timestamp, a.n_points) for a in report.anomalies] == [("West", west["timestamp"][70], 1)]
    assert [d.segment for d in report.series] == ["East", "West"]
    halves = east.assign(value=east["value"] / 2)
    doubled = detect_anomalies(pd.concat([halves, halves]), "timestamp", "value")
    assert doubled.series[0].n_points == len(east)
    short = pd.DataFrame({"timestamp": pd.date_range("2024-01-01", periods=5), "value": [1, 2, 3, 2, 1]})
    diag = detect_anomalies(short, "timestamp", "value").series[0]
    assert diag.method == "none" and "too short" in (diag.message or "")


def test_report_serializes_and_validates_arguments() -> None:
    frame = make_daily_kpi_series(12).frame
    report = detect_anomalies(frame, "timestamp", "value")
    assert AnomalyReport.model_validate(json.loads(report.model_dump_json())) == report
    assert report.series[0].frequency == "daily" and report.series[0].period == 7
    with pytest.raises(ValueError, match="columns not found"):
        detect_anomalies(frame, "timestamp", "nope")
    with pytest.raises(ValueError, match="sensitivity"):
        detect_anomalies(frame, "timestamp", "value", sensitivity="max")  # type: ignore[arg-type]


# --- the NAB scorer (bench/anomaly.py) ---------------------------------------------------------


def _tiny_corpus(bench):
    times = pd.date_range("2024-01-01", periods=200, freq="5min")
    values = np.zeros(200)
    return [
        bench.Series("a/one.csv", times, values, [(100, 119)]),
        bench.Series("a/two.csv", times, values, [(60, 69), (150, 169)]),
        bench.Series("b/none.csv", times, values, []),
    ]


def test_scorer_null_is_0_and_perfect_is_100() -> None:
    bench = _bench()
    corpus = _tiny_corpus(bench)
    null = [np.zeros(200) for _ in corpus]
    perfect = [bench.perfect_detector(s) for s in corpus]
    for profile in bench.PROFILES:
        assert bench.sweep(corpus, null, profile).score == pytest.approx(0.0)
        assert bench.sweep(corpus, perfect, profile).score == pytest.approx(100.0)


def test_scorer_rewards_early_detection_and_charges_false_alarms() -> None:
    bench = _bench()
    corpus = _tiny_corpus(bench)[:1]  # one window, rows 100-119; probation: first 30 rows
    standard = bench.PROFILES[0]

    def raw(*rows: int) -> float:
        score = np.zeros(200)
        score[list(rows)] = 1.0
        return bench.sweep(corpus, [score], standard, threshold=0.5).raw

    assert raw(100) == pytest.approx(1.0)  # first row of the window: full credit
    assert 0 < raw(115) < raw(105) < 1.0  # later in the window: less
    assert raw(100, 110) == pytest.approx(raw(100))  # only the first detection counts
    assert raw(50) == pytest.approx(-1.0 - 0.11)  # a false alarm before the window, and a miss
    assert raw(10) == pytest.approx(-1.0)  # probation: not scored
    assert -1.11 < raw(125) < -1.0  # just after the window: a cheaper false alarm
    assert bench.sweep(corpus, [np.zeros(200)], standard).threshold == pytest.approx(1.1)
