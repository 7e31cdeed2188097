"""Seasonality-aware anomaly detection on a metric over time, optionally per segment.

Per series:

1. Regularize: infer the sampling step (median spacing), put points on that grid (summing
   duplicates) and interpolate missing timestamps (linearly, then from the seasonal fit).
   Imputed points are never reported, and the diagnostics say how many there were.
2. Seasonality: candidate periods come from the sampling step (daily cycle for intraday data,
   weekly for daily data, yearly for weekly/monthly data); a candidate is kept when the series
   covers at least two cycles and its autocorrelation at that lag (after removing a rolling
   median trend, with outliers clipped) is clear.
3. Decompose with robust STL (outliers get zero weight in the loess fits, so they stay in the
   residual); daily-or-coarser positive series on the log scale. Series too short for STL, or
   without seasonality, use a rolling median baseline. Fewer than ``MIN_POINTS`` points: no
   verdict, only a message.
4. Score residuals with a robust z: a clipped spread per side (skewed noise) and per
   phase-of-cycle bin when there is enough data (noise often grows with the level), corrected
   for how much the fit shrinks ordinary residuals. The threshold is a Bonferroni bound on the
   number of points (false alarms stay rare on long minute-level series) with a floor.
5. Episodes: points beyond the threshold in one direction (with short gaps) form one episode,
   widened over contiguous points beyond a lower hysteresis threshold, and reported once at
   its onset with end and peak. Points on known ``holidays`` are not reported.
6. Sustained steps (a permanent level change the trend soon absorbs) are found on the
   deseasonalized level by comparing window medians, and reported at their onset.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field
from scipy.stats import norm
from statsmodels.tsa.seasonal import STL

__all__ = [
    "MIN_POINTS",
    "AnomalyEvent",
    "AnomalyReport",
    "SeriesDiagnostics",
    "Sensitivity",
    "detect_anomalies",
]

Sensitivity = Literal["low", "medium", "high"]

MIN_POINTS = 7
# Nominal family-wise false-alarm rate per series (Bonferroni over its points), and the
# smallest robust z ever reported. The rates are ten times stricter than the false-alarm rate
# wanted, because residuals of a robust decomposition have heavier tails than Gaussian noise:
# on clean synthetic daily series "medium" raises an alarm in roughly 2 % of series.
_ALPHA: dict[str, float] = {"low": 1e-4, "medium": 1e-3, "high": 1e-2}
_Z_FLOOR: dict[str, float] = {"low": 4.0, "medium": 3.5, "high": 3.0}
_ACF_MIN = 0.3  # autocorrelation at the period lag that counts as seasonality
_MAD_TO_SD = 1.4826
_MAX_PERIOD = 288  # longest period (in points) decomposed at full resolution
_MIN_STL_CYCLES = 7  # fewer cycles: a robust seasonal profile instead of STL
_STL_ROBUST_ITERATIONS = 6  # robustness re-weightings (statsmodels' default 15 is ~2.5x slower)


class AnomalyEvent(BaseModel):
    """One anomalous episode, reported once at its onset."""

    segment: str | None = None
    timestamp: datetime = Field(description="onset: first anomalous point")
    end: datetime = Field(description="last anomalous point of the episode")
    peak: datetime = Field(description="point with the largest deviation")
    n_points: int
    kind: Literal["outlier", "level_shift"] = Field(
        default="outlier",
        description="outlier: departs from the expected band; level_shift: a sustained step",
    )
    value: float = Field(description="observed value at the onset")
    expected: float = Field(description="expected value at the onset")
    lower: float = Field(description="lower edge of the normal band at the onset")
    upper: float = Field(description="upper edge of the normal band at the onset")
    peak_value: float
    peak_expected: float
    direction: Literal["spike", "drop"]
    severity: Literal["low", "medium", "high"]
    score: float = Field(description="largest |robust z| within the episode")


class SeriesDiagnostics(BaseModel):
    """How one series was analysed."""

    segment: str | None = None
    n_points: int
    n_imputed: int = 0
    frequency: str | None = None
    period: int | None = None
    method: Literal["stl", "rolling_median", "none"]
    log_scale: bool = Field(default=False, description="decomposed on the log of a positive series")
    threshold: float | None = Field(
        default=None, description="|robust z| beyond which points count"
    )
    n_anomalies: int = 0
    message: str | None = None


class AnomalyReport(BaseModel):
    """Anomalies found in one or more series, with per-series diagnostics."""

    anomalies: list[AnomalyEvent]
    series: list[SeriesDiagnostics]
    messages: list[str] = Field(default_factory=list)
    sensitivity: Sensitivity


@dataclass(frozen=True)
class _Grid:
    """A regularized series: grid timestamps, values (imputed where missing) and the mask."""

    times: pd.DatetimeIndex
    values: np.ndarray
    imputed: np.ndarray
    step: pd.Timedelta | None  # None for calendar months
    label: str


def _regularize(times: pd.Series, values: pd.Series) -> _Grid:
    """Put observations on a regular grid inferred from the median spacing."""
    order = np.argsort(times.to_numpy(), kind="stable")
    t = pd.DatetimeIndex(times.to_numpy()[order]).as_unit("ns")
    v = values.to_numpy(dtype=float)[order]
    diffs = np.diff(t.asi8)
    diffs = diffs[diffs > 0]
    median_ns = float(np.median(diffs)) if len(diffs) else 86_400e9
    day_ns = 86_400e9
    if 27 * day_ns <= median_ns <= 32 * day_ns:  # calendar months have unequal lengths
        months = t.year * 12 + t.month
        pos = (months - months.min()).to_numpy()
        n = int(pos.max()) + 1
        grid = pd.date_range(t[0].to_period("M").to_timestamp(), periods=n, freq="MS")
        step: pd.Timedelta | None = None
        label = "monthly"
    else:
        step = pd.Timedelta(int(round(median_ns)), unit="ns")
        pos = np.rint((t.asi8 - t.asi8[0]) / step.value).astype(np.int64)
        n = int(pos.max()) + 1
        grid = pd.DatetimeIndex(t[0] + step * np.arange(n))
        label = _step_label(step)
    sums = np.zeros(n)
    counts = np.zeros(n)
    finite = np.isfinite(v)
    np.add.at(sums, pos[finite], v[finite])
    np.add.at(counts, pos[finite], 1)
    missing = counts == 0
    out = np.where(missing, np.nan, sums)
    if missing.any() and (~missing).sum() >= 2:
        x = np.arange(n)
        out[missing] = np.interp(x[missing], x[~missing], out[~missing])
    return _Grid(grid, out, missing, step, label)


def _step_label(step: pd.Timedelta) -> str:
    seconds = step.total_seconds()
    for name, size in (("weekly", 604_800), ("daily", 86_400), ("hourly", 3_600), ("minutely", 60)):
        if seconds == size:
            return name
    return f"every {step}"


def _candidate_periods(grid: _Grid) -> list[int]:
    """Seasonal periods suggested by the sampling step (in grid points)."""
    if grid.step is None:
        return [12]
    seconds = grid.step.total_seconds()
    out: list[int] = []
    if seconds < 86_400:
        for cycle in (86_400, 604_800):  # daily cycle, then weekly
            if cycle % seconds == 0:
                out.append(int(cycle // seconds))
    elif seconds == 86_400:
        out.append(7)
    elif seconds == 604_800:
        out.append(52)
    return [p for p in out if p >= 2]


def _rolling_median(x: np.ndarray, window: int) -> np.ndarray:
    return pd.Series(x).rolling(window, center=True, min_periods=1).median().to_numpy()


def _mad_scale(r: np.ndarray) -> float:
    """Robust standard deviation; falls back to the mean absolute deviation when MAD is 0."""
    r = r[np.isfinite(r)]
    if len(r) == 0:
        return 0.0
    centred = np.abs(r - np.median(r))
    scale = _MAD_TO_SD * float(np.median(centred))
    return scale if scale > 0 else 1.2533 * float(np.mean(centred))


def _clipped_sd(r: np.ndarray, k: float = 4.5) -> tuple[float, float]:
    """Lower and upper noise scale of zero-centred residuals: per side, the root mean square
    after iteratively clipping points beyond ``k`` scales, corrected for the truncation.

    Robust STL fits the bulk of the points very tightly, so its residuals are peaked and a MAD
    understates the real spread (and overstates every z). Starting from the MAD and growing to
    the clipped spread keeps the shoulders of the noise while the anomalies, far beyond ``k``
    scales, stay out. Each side gets its own scale because business noise is often skewed
    (e.g. multiplicative noise on a log scale has a longer lower tail)."""
    r = r[np.isfinite(r)]
    correction = math.sqrt(1 - 2 * k * norm.pdf(k) / (2 * norm.cdf(k) - 1))
    sides: list[float] = []
    for side in (-r[r < 0], r[r > 0]):
        if len(side) < 3:
            sides.append(0.0)
            continue
        scale = float(np.median(side)) / 0.6745  # half-normal median
        for _ in range(50):
            kept = side[side < k * scale]
            if scale <= 0 or len(kept) < 3:
                break
            new = math.sqrt(float(np.mean(kept * kept))) / correction
            if abs(new - scale) <= 1e-6 * scale:
                break
            scale = new
        sides.append(scale)
    lower, upper = sides
    if lower <= 0 or upper <= 0:  # one side empty or degenerate: use the other (or the MAD)
        fallback = max(lower, upper) or _mad_scale(r)
        lower, upper = lower or fallback, upper or fallback
    return lower, upper


def _seasonal_strength(x: np.ndarray, period: int) -> float:
    """Autocorrelation at the period lag of the detrended, outlier-clipped series."""
    detrended = x - _rolling_median(x, period + 1 - period % 2)
    scale = _mad_scale(detrended)
    if scale == 0:
        return 0.0
    clipped = np.clip(detrended, -5 * scale, 5 * scale)
    a, b = clipped[:-period], clipped[period:]
    if a.std() == 0 or b.std() == 0:
        return 0.0
    return float(np.corrcoef(a, b)[0, 1])


def _odd(k: float) -> int:
    k = int(math.ceil(k))
    return k if k % 2 else k + 1


def _stl_components(x: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """Trend and seasonal components of a robust STL fit.

    The trend window spans ~6 cycles for short periods (6 weeks of daily data) so that a level
    shift lasting a few days stays in the residual instead of being absorbed by the trend;
    loess "jumps" of a tenth of each window (as in R's stl) keep long series fast."""
    seasonal = 13
    trend = _odd(max(1.5 * period / (1 - 1.5 / seasonal), min(6 * period, 43)))
    low_pass = _odd(period + 1)
    fit = STL(
        x,
        period=period,
        seasonal=seasonal,
        trend=trend,
        low_pass=low_pass,
        robust=True,
        seasonal_jump=max(1, seasonal // 10),
        trend_jump=max(1, trend // 10),
        low_pass_jump=max(1, low_pass // 10),
    ).fit(outer_iter=_STL_ROBUST_ITERATIONS)
    return np.asarray(fit.trend), np.asarray(fit.seasonal)


def _profile_components(x: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """Trend and seasonal components for series with only a few cycles.

    STL smooths each phase across cycles; with fewer than ~7 cycles its loess has so few
    points per phase that a short anomaly is absorbed into the seasonal component. Here the
    seasonal profile is instead the median, across all cycles, of the detrended points within
    a small phase neighbourhood (+-1/48 of the period), so a short anomaly is outvoted, and the
    trend is a rolling median over one period; two passes refine both."""
    n = len(x)
    phase = np.arange(n) % period
    half = period // 48
    seasonal = np.zeros(n)
    trend = _rolling_median(x, _odd(period))
    for _ in range(2):
        detrended = x - trend
        profile = np.empty(period)
        for p in range(period):
            near = np.abs((phase - p + period // 2) % period - period // 2) <= half
            profile[p] = np.nanmedian(detrended[near])
        profile -= profile.mean()
        seasonal = profile[phase]
        trend = _rolling_median(x - seasonal, _odd(period))
    return trend, seasonal


def _seasonal_components(x: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """Trend and seasonal components of a seasonal series.

    Long periods (e.g. 1440 minutes) with only a few cycles would leave STL a handful of
    points per phase, so its seasonal component would chase the noise. Such series are
    averaged in blocks (``period`` / block <= ``_MAX_PERIOD``), decomposed, and the components
    are interpolated back to the original resolution; the residuals keep every point."""
    block = next(
        b for b in range(max(1, math.ceil(period / _MAX_PERIOD)), period + 1) if period % b == 0
    )
    decompose = _stl_components if len(x) >= _MIN_STL_CYCLES * period else _profile_components
    if block == 1:
        return decompose(x, period)
    n_blocks = math.ceil(len(x) / block)
    padded = np.full(n_blocks * block, np.nan)
    padded[: len(x)] = x
    coarse = np.nanmean(padded.reshape(n_blocks, block), axis=1)
    trend, seasonal = decompose(coarse, period // block)
    centres = np.arange(n_blocks) * block + (block - 1) / 2
    grid = np.arange(len(x))
    return np.interp(grid, centres, trend), np.interp(grid, centres, seasonal)


def _components(y: np.ndarray, period: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(trend, seasonal): robust seasonal decomposition, or a rolling median without a period."""
    if period is not None:
        return _seasonal_components(y, period)
    return _rolling_median(y, _odd(min(max(5, len(y) // 5), 31))), np.zeros(len(y))


@functools.lru_cache(maxsize=64)
def _fit_shrinkage(n: int, period: int | None) -> float:
    """How much the baseline fit shrinks residuals of ordinary points (residual sd / noise sd).

    Points the fit follows have residuals smaller than the noise, while outliers (zero robust
    weight) keep their full deviation; scoring against the shrunken spread would overstate
    every outlier's z. Measured once per series shape by fitting the same baseline to
    unit-variance white noise (deterministic seed)."""
    m = n if period is None else min(n, max(2_000, 20 * period))
    noise = np.random.default_rng(0).normal(size=m)
    trend, seasonal = _components(noise, period)
    return min(1.0, max(float(np.std(noise - trend - seasonal)), 0.5))


def _local_scale(
    resid: np.ndarray, period: int | None, use: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper residual scale per point, from the points in ``use``; per
    phase-of-cycle bin when each bin has at least 50 points (noise often grows with the
    level, e.g. by time of day)."""
    overall = _clipped_sd(resid[use])
    lower, upper = np.full(len(resid), overall[0]), np.full(len(resid), overall[1])
    if period is None:
        return lower, upper
    n_bins = min(24, period, len(resid) // 50)
    if n_bins < 4:
        return lower, upper
    bins = (np.arange(len(resid)) % period) * n_bins // period
    for b in range(n_bins):
        here = bins == b
        lo, up = _clipped_sd(resid[here & use])
        # Floor at a fraction of the overall scale: a quiet bin must not turn noise into alarms.
        lower[here] = max(lo, 0.3 * overall[0])
        upper[here] = max(up, 0.3 * overall[1])
    return lower, upper


def _severity(score: float, threshold: float) -> Literal["low", "medium", "high"]:
    ratio = score / threshold
    return "high" if ratio >= 2.5 else ("medium" if ratio >= 1.5 else "low")


def _episodes(z: np.ndarray, threshold: float, merge_gap: int) -> list[tuple[int, int]]:
    """(start, end) index pairs of outlier episodes.

    Points beyond ``threshold`` in one direction, separated by at most ``merge_gap`` points, form
    one episode; it is then widened over the *contiguous* neighbouring points beyond a lower
    hysteresis threshold, so the onset is where the deviation started, not where it first
    crossed the alarm line."""
    low = max(2.0, 0.6 * threshold)
    out: list[tuple[int, int]] = []
    for sign in (1.0, -1.0):
        signed = sign * z
        idx = np.flatnonzero(signed > threshold)
        if len(idx) == 0:
            continue
        breaks = np.flatnonzero(np.diff(idx) > merge_gap + 1)
        starts = np.concatenate([[idx[0]], idx[breaks + 1]])
        ends = np.concatenate([idx[breaks], [idx[-1]]])
        for s, e in zip(starts, ends, strict=True):
            while s > 0 and signed[s - 1] > low:
                s -= 1
            while e < len(z) - 1 and signed[e + 1] > low:
                e += 1
            if out and out[-1][1] >= s - 1 and np.sign(z[out[-1][0]]) == sign:
                out[-1] = (out[-1][0], max(out[-1][1], int(e)))
            else:
                out.append((int(s), int(e)))
    return sorted(out)


def _level_shifts(
    level: np.ndarray, sigma: float, window: int, threshold: float
) -> list[tuple[int, float, float]]:
    """Sustained steps in the deseasonalized ``level``: (onset index, z, level before).

    Compares medians of three consecutive windows A | B | C at each point: a step at the start
    of C is ``(C - B) - (B - A)`` (the B - A term removes the local trend), scored against the
    noise of a median of ``window`` points. Requiring B - A itself to be unremarkable keeps the
    end of an earlier step from being reported again as a reverse step."""
    n = len(level)
    if n < 3 * window + 1 or sigma <= 0:
        return []
    # Median of [t-w+1, t]; missing points (holidays) are skipped.
    rolling = pd.Series(level).rolling(window, min_periods=window // 2 + 1).median().to_numpy()
    t = np.arange(2 * window, n - window + 1)
    a, b, c = rolling[t - window - 1], rolling[t - 1], rolling[t + window - 1]
    median_sd = sigma * math.sqrt(math.pi / (2 * window))
    z_step = ((c - b) - (b - a)) / (median_sd * math.sqrt(6.0))
    z_prior = (b - a) / (median_sd * math.sqrt(2.0))
    ok = (np.abs(z_step) > threshold) & (np.abs(z_prior) < 0.5 * threshold)
    out: list[tuple[int, float, float]] = []
    for run in np.split(np.flatnonzero(ok), np.flatnonzero(np.diff(np.flatnonzero(ok)) > 1) + 1):
        if not len(run):
            continue
        k = run[np.argmax(np.abs(z_step[run]))]
        # Window medians locate the step only roughly: the onset is the first nearby point
        # from which the level has moved more than halfway (and its next points agree).
        onset, half = int(t[k]), 0.5 * (c[k] - b[k])
        for j in range(max(0, onset - window // 2), min(n - 2, onset + window // 2) + 1):
            if np.nanmedian(level[j : j + 3] - b[k]) / half > 1 and (level[j] - b[k]) / half > 1:
                onset = j
                break
        out.append((onset, float(z_step[k]), float(b[k])))
    return out


def _analyse(
    times: pd.Series,
    values: pd.Series,
    segment: str | None,
    sensitivity: Sensitivity,
    holidays: set[date],
) -> tuple[list[AnomalyEvent], SeriesDiagnostics]:
    n_obs = int(np.isfinite(values.to_numpy(dtype=float)).sum())
    if n_obs < MIN_POINTS:
        return [], SeriesDiagnostics(
            segment=segment,
            n_points=n_obs,
            method="none",
            message=f"too short to assess: {n_obs} points (need at least {MIN_POINTS})",
        )
    grid = _regularize(times, values)
    x = grid.values
    n = len(x)
    notes: list[str] = []
    n_imputed = int(grid.imputed.sum())
    if n_imputed:
        notes.append(f"{n_imputed} missing timestamps were interpolated")

    # Daily-or-coarser business metrics are usually multiplicative (seasonal swings and noise
    # grow with the level): decompose their log when strictly positive. Intraday series are
    # mostly counts whose noise grows like sqrt(level), which a log over-corrects; they stay
    # on the raw scale and get a noise scale per time-of-day bin instead.
    daily_or_coarser = grid.step is None or grid.step >= pd.Timedelta(days=1)
    log_scale = daily_or_coarser and bool(np.all(x > 0))
    y = np.log(x) if log_scale else x.copy()

    period = None
    for p in _candidate_periods(grid):
        if n >= 2 * p + 1 and _seasonal_strength(y, p) >= _ACF_MIN:
            period = p
            break
    method: Literal["stl", "rolling_median"] = "stl" if period else "rolling_median"
    if period is None and any(n < 2 * p + 1 for p in _candidate_periods(grid)):
        notes.append("too short for seasonal decomposition; used a robust rolling median")
    trend, seasonal = _components(y, period)
    if n_imputed and period is not None:
        # Linear interpolation ignores the cycle: re-impute from the fit and decompose again.
        y[grid.imputed] = (trend + seasonal)[grid.imputed]
        trend, seasonal = _components(y, period)

    resid = y - trend - seasonal
    observed = ~grid.imputed
    centre = float(np.median(resid[observed]))
    dev = resid - centre
    lower_scale, upper_scale = _local_scale(dev, period, observed)
    shrink = _fit_shrinkage(n, period)
    floor = 1e-9 * max(1.0, float(np.nanmedian(np.abs(y))))
    lower_scale = np.maximum(lower_scale / shrink, floor)
    upper_scale = np.maximum(upper_scale / shrink, floor)
    z = np.where(dev >= 0, dev / upper_scale, dev / lower_scale)
    # Imputed points and known holidays carry no evidence of an anomaly.
    z[grid.imputed] = 0.0
    if holidays:
        on_holiday = np.isin(grid.times.date, np.array(sorted(holidays), dtype=object))
        if np.any(np.abs(z[on_holiday]) > _Z_FLOOR[sensitivity]):
            notes.append("deviations on known holidays were treated as expected")
        z[on_holiday] = 0.0

    threshold = max(_Z_FLOOR[sensitivity], float(norm.isf(_ALPHA[sensitivity] / (2 * n))))
    centre_line = trend + seasonal + centre

    def event(
        s: int, e: int, k: int, expected_y: float, score: float, sign: float, kind: str
    ) -> AnomalyEvent:
        back = np.exp if log_scale else (lambda a: a)
        return AnomalyEvent(
            segment=segment,
            timestamp=grid.times[s].to_pydatetime(),
            end=grid.times[e].to_pydatetime(),
            peak=grid.times[k].to_pydatetime(),
            n_points=e - s + 1,
            kind=kind,  # type: ignore[arg-type]
            value=float(x[s]),
            expected=float(back(expected_y)),
            lower=float(back(expected_y - threshold * lower_scale[s])),
            upper=float(back(expected_y + threshold * upper_scale[s])),
            peak_value=float(x[k]),
            peak_expected=float(back(centre_line[k])),
            direction="spike" if sign > 0 else "drop",
            severity=_severity(score, threshold),
            score=score,
        )

    merge_gap = max(1, round(period / 288)) if period else 1
    spans = [(s, e, "spike" if z[s] > 0 else "drop") for s, e in _episodes(z, threshold, merge_gap)]
    events: list[AnomalyEvent] = []
    for s, e, _ in spans:
        k = s + int(np.argmax(np.abs(z[s : e + 1])))
        events.append(event(s, e, k, centre_line[s], float(abs(z[k])), z[k], "outlier"))

    # Sustained steps: a permanent level change is absorbed by the trend within a few cycles,
    # so it may never leave a large residual; look for it in the deseasonalized level.
    window = (period if period <= 14 else max(15, period // 24)) if period else 7
    level = y - seasonal
    # Noise of the level from its successive differences: a step moves one difference only,
    # while it inflates the residuals of the (partly adapted) trend for weeks.
    sigma = _mad_scale(np.diff(level[observed])) / math.sqrt(2.0)
    if holidays:
        level[on_holiday] = np.nan  # expected calendar dips must not look like level changes
    for onset, z_step, before in _level_shifts(level, sigma, window, threshold):
        direction = "spike" if z_step > 0 else "drop"
        if any(d != direction and e >= onset - 2 * window and s < onset for s, e, d in spans):
            continue  # the level returning after an earlier episode is a recovery
        near = [
            i for i, (s, _, d) in enumerate(spans) if d == direction and abs(s - onset) <= window
        ]
        if near:  # the onset is already reported: it was the start of a sustained shift
            events[near[0]] = events[near[0]].model_copy(update={"kind": "level_shift"})
            continue
        end = min(onset + window - 1, n - 1)
        expected_y = before + seasonal[onset] + centre
        events.append(event(onset, end, onset, expected_y, abs(z_step), z_step, "level_shift"))
        spans.append((onset, end, direction))
    events.sort(key=lambda ev: ev.timestamp)

    diag = SeriesDiagnostics(
        segment=segment,
        n_points=n,
        n_imputed=n_imputed,
        frequency=grid.label,
        period=period,
        method=method,
        log_scale=log_scale,
        threshold=threshold,
        n_anomalies=len(events),
        message="; ".join(notes) or None,
    )
    return events, diag


def detect_anomalies(
    df: pd.DataFrame,
    time_column: str,
    value_column: str,
    segment_column: str | None = None,
    sensitivity: Sensitivity = "medium",
    holidays: Iterable[date | datetime | str] | None = None,
) -> AnomalyReport:
    """Find anomalous episodes in a metric over time, per segment if ``segment_column`` is set.

    Rows sharing a timestamp (within a segment) are summed. ``sensitivity`` trades misses for
    false alarms ("low" reports only very clear anomalies). ``holidays`` are dates whose
    deviations are expected (calendar effects) and never reported. Each episode is reported
    once at its onset, with its end, peak, expected value, normal band, direction and severity.
    """
    missing = [c for c in (time_column, value_column, segment_column) if c and c not in df.columns]
    if missing:
        raise ValueError(f"columns not found: {missing}")
    if sensitivity not in _ALPHA:
        raise ValueError(f"sensitivity must be one of {sorted(_ALPHA)}")
    holiday_dates = {pd.Timestamp(h).date() for h in holidays or []}
    times = pd.to_datetime(df[time_column])
    if getattr(times.dt, "tz", None) is not None:
        times = times.dt.tz_localize(None)
    values = pd.to_numeric(df[value_column], errors="coerce")
    frame = pd.DataFrame({"t": times, "v": values})
    if segment_column is None:
        groups: Iterable[tuple[str | None, pd.DataFrame]] = [(None, frame)]
    else:
        frame["s"] = df[segment_column].astype(str).to_numpy()
        groups = ((str(k), g) for k, g in frame.groupby("s", sort=True))

    anomalies: list[AnomalyEvent] = []
    diagnostics: list[SeriesDiagnostics] = []
    for segment, g in groups:
        g = g[g["t"].notna()]
        events, diag = _analyse(g["t"], g["v"], segment, sensitivity, holiday_dates)
        anomalies.extend(events)
        diagnostics.append(diag)
    anomalies.sort(key=lambda a: (a.timestamp, a.segment or ""))
    return AnomalyReport(
        anomalies=anomalies,
        series=diagnostics,
        messages=_summarize(diagnostics),
        sensitivity=sensitivity,
    )


def _summarize(diagnostics: list[SeriesDiagnostics], limit: int = 20) -> list[str]:
    """Per-series messages for the report (capped), plus the overall count."""
    lines = [
        f"{d.segment}: {d.message}" if d.segment is not None else d.message
        for d in diagnostics
        if d.message
    ]
    out = [line for line in lines[:limit] if line]
    if len(lines) > limit:
        out.append(f"... and {len(lines) - limit} more series with notes")
    total = sum(d.n_anomalies for d in diagnostics)
    out.append(f"{total} anomalous episode(s) in {len(diagnostics)} series")
    return out
