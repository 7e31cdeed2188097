"""Causal anomaly scores: each observation is judged only from the observations before it.

``anomaly_scores(times, values)`` returns, for every row, a score in [0, 1] that uses rows
``<= t`` only, so the same computation runs in batch, on live metrics and in monitors, and a
threshold can be swept over it (``bench/anomaly.py`` does, with NAB's scoring).

How a row is scored:

1. Predictions from the past. A *level* model (median of the previous 5 rows) and, when the
   sampling allows (>= 4 points per cycle), *seasonal* models for a daily, weekly and yearly
   cycle: the current trailing-cycle mean plus the median deviation from the trailing-cycle
   mean at the same phase 1-5 cycles ago, so a level shift moves the prediction within a cycle.
   Cycles are matched on timestamps: irregular sampling and gaps need no filling-in. Each row
   uses the model with the smallest recent squared error; a seasonal model is compared with
   the level model over the same rows and must be 20 % better.
2. Statistics of that model's residual, in units of its robust recent scale: the point
   deviation, the mean deviation over the last 6 rows (a sustained shift: a missing daily peak,
   a level shift) and the mean surprise of the last 6 rows (a burst of unusual values). Plus
   how far the value lies beyond the range seen so far (range at least 6 noise scales).
3. Each statistic becomes a tail probability against its own history (the earlier values of the
   same statistic on the same series): the empirical frequency, extrapolated beyond the top
   values with an exponential tail whose scale is the median excess of the top 2 % (robust:
   a past anomaly does not mask the next one). Until a statistic has a history, deviations use
   a Student-t tail; early records get a wide prior (a record by less than the noise is no news).
   A value within the range seen within 2 hours of the same time of the cycle in the last 3
   cycles (widened by half its width) is no point deviation: a daily spike whose time jitters
   by a few rows is familiar, though the point prediction misses it.
4. Evidence = -log10 of each probability minus a per-statistic penalty (0.6 = log10(4), a
   Bonferroni allowance for the four; the autocorrelated collective statistics need 100-1000x
   more), maximum over statistics; score = evidence / 20, capped at 1. A deviation that brings
   the value back towards the long-run median (the end of a dip) carries no evidence.
5. Re-alarm suppression: a row keeps its score only when its evidence exceeds all evidence of
   the preceding 6 hours (at most 72 rows): after an alarm only something stronger alarms.
   Nothing scores during the first cycle of the shortest modelled seasonality (a first daily
   peak is not an anomaly), or the first 8 hours without seasonality.

Flat stretches have zero residual scale: scales are floored at 0.1 % of the range seen so far,
and statistics whose history is constant have a minimum tail scale, so a flat series scores 0.
Runtime: O(n log n) vectorized numpy/pandas, ~0.3 s for 20,000 points.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

__all__ = ["DEFAULT_THRESHOLD", "ScoreTrace", "anomaly_scores"]

# The score threshold of the tool ("medium" sensitivity): the threshold that maximizes NAB's
# standard-profile score of these scores on the NAB development split (bench/anomaly.py: 35
# series, 55 windows; optimum 0.106 -> standard 70.1; 0.11, the middle of the plateau
# 0.10-0.128 where it stays within 2 points, -> 69.5). Evidence 2.2 = 20 x 0.11, i.e. a
# tail probability of about 1e-3 after the per-statistic penalty.
DEFAULT_THRESHOLD = 0.11

_DAY_NS = 86_400 * 10**9
_CYCLES: tuple[tuple[str, int], ...] = (
    ("daily", _DAY_NS),
    ("weekly", 7 * _DAY_NS),
    ("yearly", 365 * _DAY_NS),
)
_LAGS = (1, 2, 3, 4, 5)  # seasonal models compare with the same phase 1-5 cycles ago
_LEVEL_ROWS = 5  # the level model: median of the previous 5 rows
_STEP_ROWS = 200  # the sampling step is the median interval of the first 200 rows
_SEASONAL_PENALTY = 1.2  # a seasonal model must beat the level model's error by 20 %
_HISTORY = 2000  # rows of residuals behind the robust scale and the model choice
_SCALE_FLOOR = 1e-3  # residual scales are at least 0.1 % of the range seen so far
_SCALE_MIN_ROWS = 8  # residuals needed before a model's deviations are judged
# Seasonal familiarity: a value within the range seen +-2 hours around the same phase in the
# last 3 cycles (median of their minima and maxima), widened by half its width, is not judged
# as a point deviation.
_FAMILIAR_NS = 2 * 3_600 * 10**9
_FAMILIAR_LAGS = 3
_FAMILIAR_MIN_CYCLES = 2
_FAMILIAR_MARGIN = 0.5
_SHORT = 6  # rows of the collective statistics (sustained shift, burst of surprises)
_CALIBRATION_HISTORY = 8640  # rows of a statistic's own history used to calibrate it
# The calibration is refreshed after every 10 % of its history (4 to 288 rows at a time).
_BLOCK_MIN = 4
_BLOCK_MAX = 288
# Values of a statistic needed before it is calibrated (earlier rows score 0): at least 8, and
# for high-frequency series the rows of the first 8 hours (at most 100 rows).
_MIN_HISTORY = 8
_WARMUP_NS = 8 * 3_600 * 10**9
_WARMUP_MAX_ROWS = 100
_TAIL_FRACTION = 0.02  # the tail fit uses the top 2 % of the history (at least _TAIL_MIN values)
_TAIL_MIN = 10
# Smallest tail scales, so that a statistic whose history is (nearly) constant, e.g. exact
# zeros on a noise-free series, does not make any small change infinitely surprising.
_Z_TAIL_FLOOR = 0.1  # deviation and shift statistics, in residual-scale units
_BURST_TAIL_FLOOR = 0.1  # mean surprise, in log10 units
_RANGE_TAIL_FLOOR = 0.01  # beyond-range excess, as a fraction of the range seen so far
_RANGE_MIN_SCALES = 6.0  # the range counts as at least 6 noise scales wide
_RANGE_NOISE_FLOOR = 2.0  # early prior: a record needs ~2 noise scales of excess to count ...
_RANGE_PRIOR_ROWS = 100  # ... fading out over the first 100 rows
# Evidence penalties (log10 units) per statistic: point deviation, sustained shift, burst of
# surprises, beyond the range. log10(4) = 0.6 is a Bonferroni allowance for the four; the
# collective statistics (means over _SHORT rows, strongly autocorrelated, many near-repeats)
# need 100-1000 times stronger evidence.
_PENALTY = (0.6, 3.6, 2.6, 0.6)
_EVIDENCE_SCALE = 20.0  # score = evidence / 20, capped at 1 (evidence 20: probability 1e-20)
_REALARM_NS = 6 * 3_600 * 10**9  # re-alarm suppression window: 6 hours ...
_REALARM_MAX_ROWS = 72  # ... and at most 72 rows
STATISTICS = ("deviation", "shift", "burst", "range")


@dataclass(frozen=True)
class ScoreTrace:
    """Per-row output of :func:`anomaly_scores` (all arrays have one entry per input row)."""

    score: np.ndarray  # alarm score in [0, 1], after re-alarm suppression
    raw: np.ndarray  # score before suppression (an episode keeps scoring while it lasts)
    expected: np.ndarray  # prediction of the model used for the row (NaN while learning)
    scale: np.ndarray  # robust residual scale of that model (NaN while learning)
    model: np.ndarray  # 0: level model; k >= 1: the seasonal model of ``cycles[k - 1]``
    cause: np.ndarray  # index into STATISTICS of the strongest evidence
    cycles: tuple[str, ...]  # seasonal cycles that were modelled, e.g. ("daily", "weekly")
    step_ns: int  # sampling step: median interval of the first rows
    # -log10 tail probability of each statistic in STATISTICS (rows x 4, NaN: not judged),
    # before the per-statistic penalties
    log_p: np.ndarray | None = None


def anomaly_scores(times: object, values: object, seasonal_envelope: bool = True) -> ScoreTrace:
    """Causal anomaly scores of ``values`` observed at ``times`` (rows in arrival order).

    Missing values (NaN) score 0 and are not learnt from. Timestamps that go backwards are
    treated as equal to the latest one seen (a row is never judged by later rows).
    ``seasonal_envelope=False`` leaves out the seasonal familiarity (step 3): the detector as
    it was before it, kept for the benchmark's comparison."""
    t_raw = pd.DatetimeIndex(pd.to_datetime(times)).as_unit("ns").asi8
    x = np.asarray(values, dtype=float)
    n = len(x)
    if len(t_raw) != n:
        raise ValueError("times and values must have the same length")
    if n == 0:
        empty = np.zeros(0)
        return ScoreTrace(empty, empty, empty, empty, np.zeros(0, int), np.zeros(0, int), (), 0)
    keep = np.isfinite(x)
    if not keep.all():
        inner = anomaly_scores(t_raw[keep], x[keep], seasonal_envelope)
        return _expand(inner, keep)
    t = np.maximum.accumulate(t_raw)
    # The sampling step: the median interval among the first _STEP_ROWS rows (so that later
    # rows never change it, nor any score).
    diffs = np.diff(t[: _STEP_ROWS + 1])
    diffs = diffs[diffs > 0]
    step = int(np.median(diffs)) if len(diffs) else _DAY_NS

    level = _past_median(x, _LEVEL_ROWS)
    predictions = [level]
    cycles: list[str] = []
    candidates = [(name, period) for name, period in _CYCLES if step * 4 <= period]
    for name, period in candidates:
        # a cycle longer than the data has no earlier cycle to compare with anywhere:
        # skipping its (all-missing) prediction changes no score
        if period < t[-1] - t[0] + step:
            predictions.append(_seasonal_prediction(t, x, period, step))
            cycles.append(name)

    hi = _past_extreme(x, np.maximum)
    lo = _past_extreme(x, np.minimum)
    value_range = np.nan_to_num(hi - lo)
    floor = np.maximum(_SCALE_FLOOR * value_range, 1e-12 * np.maximum(np.abs(x), 1.0))
    warmup = int(max(_MIN_HISTORY, min(_WARMUP_MAX_ROWS, round(_WARMUP_NS / step))))
    fits = [_ModelFit(x, pred, floor, warmup) for pred in predictions]

    model = _choose_models(fits)
    rows = np.arange(n)
    per_model = np.stack([f.log_p for f in fits])  # (models, 3, n)
    chosen = per_model[model, :, rows].T  # (3, n): the statistics of each row's model

    excess = np.maximum(np.maximum(x - hi, lo - x), 0.0)
    # The range seen so far, but at least _RANGE_MIN_SCALES residual scales of the level
    # model: early on, or on a very regular series, the range understates the variability.
    # (before that scale exists: the mean absolute change between consecutive rows)
    change = np.concatenate([[np.nan], np.abs(np.diff(x))])
    rough = pd.Series(change).shift(1).expanding().mean().to_numpy()
    noise = np.where(np.isfinite(fits[0].scale), fits[0].scale, rough)
    spread = np.maximum(value_range, _RANGE_MIN_SCALES * np.nan_to_num(noise))
    beyond = np.where(spread > 0, excess / np.where(spread > 0, spread, 1.0), 0.0)
    # Tail scale of the excess: at least 1 % of the spread; early on (few rows seen, so the
    # range is still filling in) also _RANGE_NOISE_FLOOR noise scales, a prior that fades
    # out over the first _RANGE_PRIOR_ROWS rows.
    fade = np.maximum(0.0, 1.0 - np.arange(n) / _RANGE_PRIOR_ROWS)
    range_floor = np.maximum(
        _RANGE_TAIL_FLOOR,
        fade * _RANGE_NOISE_FLOOR * np.nan_to_num(noise) / np.where(spread > 0, spread, 1.0),
    )
    range_log_p = _log_tail(beyond, warmup, tail_floor=range_floor)

    expected = np.vstack([f.prediction for f in fits])[model, rows]
    scale = np.vstack([f.scale for f in fits])[model, rows]
    # A return towards the usual level (e.g. the end of a dip) is no new anomaly: a deviation
    # that brings the value back towards the long-run median carries no evidence.
    centre = pd.Series(x).shift(1).rolling(_HISTORY, min_periods=5).median().to_numpy()
    recovering = (np.abs(x - centre) < np.abs(expected - centre)) & (
        np.sign(x - centre) == np.sign(expected - centre)
    )
    chosen = chosen.copy()
    # A value inside the range usually seen at this time of the cycle is no deviation, even
    # when the point prediction misses it (a daily spike whose time jitters by a few rows).
    periods = [period for name, period in _CYCLES if name in cycles]
    if periods and seasonal_envelope:
        familiar = _familiar(t, x, periods)
    else:
        familiar = np.zeros(n, dtype=bool)
    chosen[0] = np.where(recovering | familiar, np.nan, chosen[0])
    log_p = np.vstack([chosen, range_log_p[None, :]])
    evidence = np.nan_to_num(log_p - np.asarray(_PENALTY)[:, None], nan=0.0)
    cause = np.argmax(evidence, axis=0)
    strength = np.maximum(evidence.max(axis=0), 0.0)
    raw = np.minimum(strength / _EVIDENCE_SCALE, 1.0)
    window = int(min(_REALARM_MAX_ROWS, max(1, round(_REALARM_NS / step))))
    previous = _past_max(strength, window)
    score = np.where(strength > previous, raw, 0.0)
    # Nothing is reported before one full cycle of the shortest modelled seasonality has been
    # seen (a first daily peak is not an anomaly), or before _WARMUP_NS without seasonality.
    learning = candidates[0][1] if candidates else _WARMUP_NS  # from the sampling step only
    score = np.where(t - t[0] >= learning, score, 0.0)
    raw = np.where(t - t[0] >= learning, raw, 0.0)
    return ScoreTrace(score, raw, expected, scale, model, cause, tuple(cycles), step, log_p.T)


# --- models ------------------------------------------------------------------------------------


class _ModelFit:
    """Residual statistics of one prediction, as -log10 tail probabilities (3 x n)."""

    def __init__(
        self, x: np.ndarray, prediction: np.ndarray, floor: np.ndarray, warmup: int
    ) -> None:
        self.prediction = prediction
        e = x - prediction
        ok = np.isfinite(e)
        abs_e = np.where(ok, np.abs(e), np.nan)
        past = pd.Series(abs_e).shift(1).rolling(_HISTORY, min_periods=_SCALE_MIN_ROWS)
        scale = np.maximum(1.4826 * past.median().to_numpy(), 0.5 * past.mean().to_numpy())
        self.scale = np.where(np.isfinite(scale), np.maximum(scale, floor), np.nan)
        z = e / self.scale
        deviation = np.abs(z)
        shift = np.abs(_trailing_mean(z, _SHORT)) * math.sqrt(_SHORT)
        log_p_dev = _log_tail(deviation, warmup, tail_floor=_Z_TAIL_FLOOR)
        # Until the deviation has a history of its own, a Student-t tail with as many degrees
        # of freedom as residuals behind the scale (a wide prior for short histories).
        count = past.count().to_numpy()
        prior = -student_t.logsf(deviation, np.maximum(count - 1, 1)) / math.log(10.0)
        prior = prior - math.log10(2.0)
        log_p_dev = np.where(np.isfinite(log_p_dev), log_p_dev, prior)
        burst = _trailing_mean(log_p_dev, _SHORT)
        log_p = np.vstack(
            [
                log_p_dev,
                _log_tail(shift, warmup, tail_floor=_Z_TAIL_FLOOR),
                _log_tail(burst, warmup, tail_floor=_BURST_TAIL_FLOOR),
            ]
        )
        self.log_p = np.where(np.isfinite(log_p), log_p, np.nan)
        self.squared = np.where(ok, e * e, np.nan)
        self.valid = ok


def _recent_mse(squared: np.ndarray) -> np.ndarray:
    mse = pd.Series(squared).shift(1).rolling(_HISTORY, min_periods=5).mean().to_numpy()
    return np.where(np.isfinite(mse), mse, np.inf)


def _choose_models(fits: list[_ModelFit]) -> np.ndarray:
    """Per row, the model with the smallest recent squared error. Each seasonal model is
    compared with the level model over the same rows (where the seasonal model predicts), and
    must beat it by ``_SEASONAL_PENALTY``."""
    n = len(fits[0].prediction)
    best = np.zeros(n, dtype=int)
    best_ratio = np.ones(n)
    level = fits[0]
    for k, fit in enumerate(fits[1:], start=1):
        mine = _recent_mse(fit.squared)
        theirs = _recent_mse(np.where(fit.valid, level.squared, np.nan))
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(np.isfinite(mine), _SEASONAL_PENALTY * mine / theirs, np.inf)
        better = fit.valid & (ratio < best_ratio)
        best = np.where(better, k, best)
        best_ratio = np.where(better, ratio, best_ratio)
    return best


def _seasonal_prediction(t: np.ndarray, x: np.ndarray, period: int, step: int) -> np.ndarray:
    """Trailing-cycle mean now plus the median deviation from it at the same phase 1-3 cycles
    ago (NaN until one earlier cycle exists)."""
    trailing = _trailing_time_mean(t, x, period)
    deviations = []
    rows = np.arange(len(x))
    for k in _LAGS:
        j = _row_at(t, t - k * period, step // 2)
        ok = (j >= 0) & (j < rows)
        jj = np.where(ok, j, 0)
        deviations.append(np.where(ok, x[jj] - trailing[jj], np.nan))
    stacked = np.vstack(deviations)
    # median of the available lags per row (NaN sorts last; none available: NaN)
    srt = np.sort(stacked, axis=0)
    count = np.isfinite(srt).sum(axis=0)
    lower = np.take_along_axis(srt, np.maximum((count - 1) // 2, 0)[None, :], axis=0)[0]
    upper = np.take_along_axis(srt, np.maximum(count // 2, 0)[None, :], axis=0)[0]
    median = np.where(count > 0, (lower + upper) / 2, np.nan)
    return trailing + median


def _familiar(t: np.ndarray, x: np.ndarray, periods: list[int]) -> np.ndarray:
    """Rows whose value lies within the seasonal envelope of any of ``periods``: the range
    seen within +-_FAMILIAR_NS of the same phase (the median, over the last _FAMILIAR_LAGS
    cycles, of that neighbourhood's minimum and maximum; at least _FAMILIAR_MIN_CYCLES cycles
    available), widened on both sides by _FAMILIAR_MARGIN of its width (the height of a
    recurring spike varies from one cycle to the next).
    Uses rows strictly before each row only: the neighbourhood ends _FAMILIAR_NS after the
    phase one cycle ago, well before the row itself."""
    tol = _FAMILIAR_NS
    series = pd.Series(x, index=pd.DatetimeIndex(t))
    window = pd.Timedelta(2 * tol, unit="ns")
    rolling_max = series.rolling(window).max().to_numpy()
    rolling_min = series.rolling(window).min().to_numpy()
    out = np.zeros(len(x), dtype=bool)
    for period in periods:
        highs, lows = [], []
        for k in range(1, _FAMILIAR_LAGS + 1):
            # last row at or before (phase k cycles ago + tol), if inside the neighbourhood
            j = np.searchsorted(t, t - k * period + tol, side="right") - 1
            jj = np.maximum(j, 0)
            ok = (j >= 0) & (t[jj] > t - k * period - tol)
            highs.append(np.where(ok, rolling_max[jj], np.nan))
            lows.append(np.where(ok, rolling_min[jj], np.nan))
        high, low = np.vstack(highs), np.vstack(lows)
        enough = np.isfinite(high).sum(axis=0) >= _FAMILIAR_MIN_CYCLES
        high[:, ~enough] = np.nan
        low[:, ~enough] = np.nan
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: not familiar
            upper = np.nanmedian(high, axis=0)
            lower = np.nanmedian(low, axis=0)
        margin = _FAMILIAR_MARGIN * (upper - lower)
        out |= (x <= upper + margin) & (x >= lower - margin)
    return out


def _row_at(t: np.ndarray, target: np.ndarray, tolerance: int) -> np.ndarray:
    """Index of the row whose time is nearest to each target (within tolerance), else -1."""
    n = len(t)
    j = np.searchsorted(t, target)
    before = np.clip(j - 1, 0, n - 1)
    after = np.clip(j, 0, n - 1)
    pick = np.where(np.abs(t[before] - target) <= np.abs(t[after] - target), before, after)
    return np.where(np.abs(t[pick] - target) <= tolerance, pick, -1)


def _trailing_time_mean(t: np.ndarray, x: np.ndarray, span: int) -> np.ndarray:
    """Mean of the rows in (t_i - span, t_i), excluding row i itself (row 0: its own value)."""
    csum = np.concatenate([[0.0], np.cumsum(x)])
    start = np.searchsorted(t, t - span, side="right")
    end = np.arange(len(x))  # rows before i
    count = end - start
    total = csum[end] - csum[start]
    out = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    out[0] = x[0]
    return np.where(np.isfinite(out), out, pd.Series(x).ffill().to_numpy())


def _past_median(x: np.ndarray, rows: int) -> np.ndarray:
    out = pd.Series(x).shift(1).rolling(rows, min_periods=1).median().to_numpy()
    return out


def _past_extreme(x: np.ndarray, op: np.ufunc) -> np.ndarray:
    out = np.empty(len(x))
    out[0] = np.nan
    out[1:] = op.accumulate(x)[:-1]
    return out


def _past_max(x: np.ndarray, rows: int) -> np.ndarray:
    return pd.Series(x).shift(1).rolling(rows, min_periods=1).max().fillna(-np.inf).to_numpy()


def _trailing_mean(x: np.ndarray, rows: int) -> np.ndarray:
    """Mean of the last ``rows`` values including the current one (NaN until all exist)."""
    return pd.Series(x).rolling(rows, min_periods=rows).mean().to_numpy()


# --- calibration -------------------------------------------------------------------------------


def _log_tail(
    stat: np.ndarray, warmup: int, tail_floor: float | np.ndarray = 0.0
) -> np.ndarray:
    """-log10 of the probability that the statistic's earlier values reach each value.

    Within the observed range this is the empirical frequency (+1 smoothing); in the upper
    tail, an exponential tail fitted to the excesses of the top values over the next one
    (scale = median excess / ln 2, robust to a few past anomalies) takes over when it is
    smaller, so values beyond everything seen get a probability below 1/N. History: the last
    ``_CALIBRATION_HISTORY`` finite values, updated in blocks (causal: a block is judged on the
    values before it). NaN until ``warmup`` values exist."""
    n = len(stat)
    out = np.full(n, np.nan)
    idx = np.flatnonzero(np.isfinite(stat))
    vals = stat[idx]
    floors = np.broadcast_to(np.asarray(tail_floor, dtype=float), (n,))[idx]
    m = len(vals)
    history = np.empty(0)
    start = 0  # position in vals of the oldest value in history
    pos = 0
    ln10 = math.log(10.0)
    while pos < m:
        size = len(history)
        block = int(min(max(size // 10, _BLOCK_MIN), _BLOCK_MAX))
        cur = vals[pos : pos + block]
        if size >= warmup:
            count = size - np.searchsorted(history, cur, side="left")
            log_emp = np.log10((count + 1.0) / (size + 1.0))
            k = int(min(max(_TAIL_FRACTION * size, _TAIL_MIN), size - 1))
            u = history[size - k - 1]
            top = history[size - k :]  # sorted: its median is the middle element(s)
            median_excess = 0.5 * (top[(k - 1) // 2] + top[k // 2]) - u
            beta = np.maximum(
                np.maximum(median_excess / math.log(2.0), floors[pos : pos + block]),
                1e-9 + 1e-3 * abs(u),
            )
            log_tail = math.log10((k + 1.0) / (size + 1.0)) - (cur - u) / beta / ln10
            log_p = np.where(cur > u, np.minimum(log_tail, log_emp), log_emp)
            out[idx[pos : pos + block]] = -log_p
        # add the block to the history, drop what fell out of the window
        ordered = np.sort(cur)
        history = np.insert(history, np.searchsorted(history, ordered), ordered)
        pos += len(cur)
        excess_count = pos - start - _CALIBRATION_HISTORY
        if excess_count > 0:
            old = np.sort(vals[start : start + excess_count])
            history = np.delete(history, _positions_of(history, old))
            start += excess_count
    return out


def _positions_of(history: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Distinct positions in sorted ``history`` holding the sorted values ``old`` (repeated
    values take consecutive slots)."""
    first = np.searchsorted(history, old, side="left")
    group_start = np.flatnonzero(np.r_[True, old[1:] != old[:-1]])
    group = np.cumsum(np.r_[True, old[1:] != old[:-1]]) - 1
    rank = np.arange(len(old)) - group_start[group]
    return first + rank


def _expand(inner: ScoreTrace, keep: np.ndarray) -> ScoreTrace:
    """Scores of the finite rows put back in place; the NaN rows score 0."""

    def put(a: np.ndarray, fill: float) -> np.ndarray:
        out = np.full(len(keep), fill, dtype=float)
        out[keep] = a
        return out

    model = np.zeros(len(keep), dtype=int)
    model[keep] = inner.model
    cause = np.zeros(len(keep), dtype=int)
    cause[keep] = inner.cause
    return ScoreTrace(
        put(inner.score, 0.0),
        put(inner.raw, 0.0),
        put(inner.expected, np.nan),
        put(inner.scale, np.nan),
        model,
        cause,
        inner.cycles,
        inner.step_ns,
        None if inner.log_p is None else np.vstack([put(c, np.nan) for c in inner.log_p.T]).T,
    )
