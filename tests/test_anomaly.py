"""Anomaly detection: known answers on small generated series."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from agent_core.analytics import AnomalyReport, detect_anomalies
from agent_core.analytics.synthetic import LabelledSeries, make_daily_kpi_series, make_minute_series


def _detect(series: LabelledSeries) -> AnomalyReport:
    return detect_anomalies(series.frame, "timestamp", "value", holidays=series.holidays)


def _assert_one_event_per_window(
    series: LabelledSeries, report: AnomalyReport, tolerance: pd.Timedelta
) -> None:
    """Every true window gets exactly one event, starting at its onset (within tolerance),
    and there is no other event."""
    onsets = [pd.Timestamp(a.timestamp) for a in report.anomalies]
    assert len(onsets) == len(series.windows), (onsets, series.windows)
    for window, onset in zip(series.windows, sorted(onsets), strict=True):
        assert abs(onset - window.start) <= tolerance, (onset, window)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_daily_kpi_anomalies_reported_once_at_onset(seed: int) -> None:
    series = make_daily_kpi_series(seed)
    report = _detect(series)
    _assert_one_event_per_window(series, report, pd.Timedelta(days=1))
    diag = report.series[0]
    assert (diag.method, diag.period, diag.frequency) == ("stl", 7, "daily")
    for event, window in zip(report.anomalies, series.windows, strict=True):
        expected_direction = "spike" if window.kind in ("spike", "level_shift_up") else "drop"
        assert event.direction == expected_direction
        assert event.lower < event.expected < event.upper
        assert event.timestamp <= event.peak <= event.end


def test_multi_day_level_shift_is_one_event() -> None:
    series = make_daily_kpi_series(5, n_anomalies=0, with_holidays=False)
    frame = series.frame.copy()
    frame.loc[60:64, "value"] *= 0.7  # five days 30 % down
    report = detect_anomalies(frame, "timestamp", "value")
    assert len(report.anomalies) == 1
    event = report.anomalies[0]
    assert pd.Timestamp(event.timestamp) == frame["timestamp"][60]
    assert event.direction == "drop" and event.n_points >= 4
    assert event.severity in ("medium", "high")


@pytest.mark.parametrize("seed", range(6))
def test_clean_seasonal_series_has_no_anomalies(seed: int) -> None:
    series = make_daily_kpi_series(seed, n_anomalies=0)
    report = _detect(series)
    assert report.anomalies == []
    assert report.series[0].period == 7


def test_known_holidays_are_not_reported() -> None:
    series = make_daily_kpi_series(6, n_anomalies=0)
    assert series.holidays
    assert _detect(series).anomalies == []
    unannounced = detect_anomalies(series.frame, "timestamp", "value")
    holiday_dates = {h.date() for h in series.holidays}
    assert {a.timestamp.date() for a in unannounced.anomalies} == holiday_dates


def test_permanent_level_shift_reported_at_onset() -> None:
    series = make_daily_kpi_series(7, n_anomalies=0, with_holidays=False)
    frame = series.frame.copy()
    frame.loc[80:, "value"] *= 1.3
    report = detect_anomalies(frame, "timestamp", "value")
    assert len(report.anomalies) == 1
    event = report.anomalies[0]
    assert event.kind == "level_shift" and event.direction == "spike"
    assert abs(pd.Timestamp(event.timestamp) - frame["timestamp"][80]) <= pd.Timedelta(days=1)


def test_gradual_trend_change_is_not_an_anomaly() -> None:
    series = make_daily_kpi_series(8, n_anomalies=0, with_holidays=False)
    frame = series.frame.copy()
    frame.loc[70:, "value"] *= 1 + 0.01 * np.arange(len(frame) - 70)
    assert detect_anomalies(frame, "timestamp", "value").anomalies == []


@pytest.mark.parametrize("seed", [0, 1])
def test_minute_level_series(seed: int) -> None:
    series = make_minute_series(seed)
    report = _detect(series)
    _assert_one_event_per_window(series, report, pd.Timedelta(minutes=5))
    diag = report.series[0]
    assert (diag.period, diag.frequency, diag.log_scale) == (1440, "minutely", False)


def test_clean_minute_series_has_no_anomalies() -> None:
    for seed in range(3):
        assert _detect(make_minute_series(seed, n_anomalies=0)).anomalies == []


def test_gaps_are_interpolated_and_reported() -> None:
    series = make_daily_kpi_series(2)
    true_days = {w.start for w in series.windows}
    keep = ~series.frame["timestamp"].isin(true_days)
    missing = series.frame[keep].index[[20, 21, 22, 50]]
    frame = series.frame.drop(index=missing)
    report = detect_anomalies(frame, "timestamp", "value", holidays=series.holidays)
    diag = report.series[0]
    assert diag.n_imputed == 4
    assert "4 missing timestamps were interpolated" in (diag.message or "")
    assert any("interpolated" in m for m in report.messages)
    _assert_one_event_per_window(series, report, pd.Timedelta(days=1))


def test_too_short_series() -> None:
    frame = pd.DataFrame(
        {"timestamp": pd.date_range("2024-01-01", periods=5, freq="D"), "value": [1, 2, 3, 2, 1]}
    )
    report = detect_anomalies(frame, "timestamp", "value")
    assert report.anomalies == []
    assert report.series[0].method == "none"
    assert "too short" in (report.series[0].message or "")


def test_short_series_falls_back_to_rolling_median() -> None:
    values = [100.0, 102, 98, 101, 99, 100, 103, 97, 160, 101, 99, 100]
    frame = pd.DataFrame(
        {"timestamp": pd.date_range("2024-01-01", periods=len(values), freq="D"), "value": values}
    )
    report = detect_anomalies(frame, "timestamp", "value")
    diag = report.series[0]
    assert diag.method == "rolling_median"
    assert "too short for seasonal decomposition" in (diag.message or "")
    assert [a.timestamp.day for a in report.anomalies] == [9]
    assert report.anomalies[0].direction == "spike"


def test_segments_are_analysed_separately() -> None:
    east = make_daily_kpi_series(9, n_anomalies=0, with_holidays=False).frame.assign(region="East")
    west = make_daily_kpi_series(10, n_anomalies=0, with_holidays=False).frame.assign(region="West")
    west.loc[40, "value"] *= 0.4
    frame = pd.concat([east, west], ignore_index=True)
    report = detect_anomalies(frame, "timestamp", "value", segment_column="region")
    assert [(a.segment, a.timestamp.date()) for a in report.anomalies] == [
        ("West", west["timestamp"][40].date())
    ]
    assert [d.segment for d in report.series] == ["East", "West"]


def test_duplicate_timestamps_are_summed() -> None:
    series = make_daily_kpi_series(11, n_anomalies=0, with_holidays=False)
    halves = series.frame.assign(value=series.frame["value"] / 2)
    report = detect_anomalies(pd.concat([halves, halves]), "timestamp", "value")
    assert report.series[0].n_points == len(series.frame)
    assert report.anomalies == []


def test_report_serializes_and_validates_arguments() -> None:
    report = _detect(make_daily_kpi_series(12))
    assert AnomalyReport.model_validate(json.loads(report.model_dump_json())) == report
    with pytest.raises(ValueError, match="columns not found"):
        detect_anomalies(make_daily_kpi_series(12).frame, "timestamp", "nope")
    with pytest.raises(ValueError, match="sensitivity"):
        detect_anomalies(make_daily_kpi_series(12).frame, "timestamp", "value", sensitivity="max")  # type: ignore[arg-type]
