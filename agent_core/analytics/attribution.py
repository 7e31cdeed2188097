"""Multi-dimensional root-cause localization: which dimension=value combinations explain why a
metric deviated from its baseline (forecast, or a previous period).

Ratio metrics (conversion rate, AOV) are localized twice: on the per-leaf *rate* (the
numerator against the baseline rate times the current denominator) and on the per-leaf
*volume* of the denominator against its typical growth (where the mix moved). Each asserted
element's contribution to the ratio change is split into a rate effect (its own ratio changed)
and a mix effect (denominator share moved between it and the rest), an exact midpoint
decomposition of the element-versus-rest ratio.

The search itself is `agent_core.analytics.localization`; this module turns tables into its
leaves, and what it finds into contributions, rate and mix effects and an explanation.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from agent_core.analytics.inputs import Period
from agent_core.analytics.localization import AttributionConfig, Cube, Hit, element_leaves, localize

__all__ = [
    "AttributionResult",
    "Candidate",
    "Period",
    "RootCause",
    "attribute_change",
    "attribute_change_between_periods",
    "attribute_period_leaves",
]

JsonScalar = str | int | float | bool | None


# --------------------------------------------------------------------------------------------
# Boundary models
# --------------------------------------------------------------------------------------------


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
    root_causes: list[RootCause] = Field(description="the largest contributions first")
    unlisted_root_causes: int = Field(
        default=0, description="asserted root causes beyond the listed ones (smaller contributions)"
    )
    explained_share: float = Field(description="sum of the shares of all asserted root causes")
    candidates: list[Candidate]
    explanation: str
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


def _encode(df: pd.DataFrame, dimensions: list[str]) -> tuple[Cube, list[np.ndarray]]:
    """Integer-code the dimension columns (missing values become the label "(missing)")."""
    codes = np.empty((len(df), len(dimensions)), dtype=np.int64)
    uniques: list[np.ndarray] = []
    for j, col in enumerate(dimensions):
        col_codes, col_uniques = pd.factorize(df[col].astype(object).fillna("(missing)"))
        codes[:, j] = col_codes
        uniques.append(np.asarray(col_uniques, dtype=object))
    return Cube(codes, [max(1, len(u)) for u in uniques]), uniques


def _py(value: object) -> JsonScalar:
    """A JSON-friendly Python scalar for a dimension value."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _element_dict(hit: Hit, dimensions: list[str], uniques: list[np.ndarray]) -> dict[str, JsonScalar]:
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
        notes.append("negative leaf values were treated as zero when localizing")
    selected, candidates = localize(cube, np.maximum(f, 0.0), np.maximum(v, 0.0), cfg) if len(f) >= 3 else ([], [])
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
    listed, unlisted = _largest_first(root_causes, cfg, notes)
    return AttributionResult(
        metric_kind="additive",
        dimensions=dimensions,
        total_baseline=total_f,
        total_actual=total_v,
        total_deviation=deviation,
        relative_change=total_v / total_f - 1 if total_f != 0 else None,
        root_causes=listed,
        unlisted_root_causes=unlisted,
        explained_share=explained,
        candidates=cands,
        explanation=_explain_additive(metric_name, total_f, total_v, listed, explained, unlisted),
        notes=notes,
    )


def _largest_first(root_causes: list[RootCause], cfg: AttributionConfig, notes: list[str]) -> tuple[list[RootCause], int]:
    """Root causes by absolute contribution, cut to ``max_root_causes`` (a reader, or a model,
    cannot use fifty); how many were left out is returned and noted."""
    ranked = sorted(root_causes, key=lambda rc: -abs(rc.contribution))
    listed, rest = ranked[: cfg.max_root_causes], ranked[cfg.max_root_causes :]
    if rest:
        share = sum(rc.share for rc in rest)
        notes.append(f"{len(rest)} more root cause(s) not listed, together {share:.0%} of the change")
    return listed, len(rest)


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

    # Rate: the numerator against what the baseline ratio would give on the current
    # denominator, on leaves present in both periods; its ratio is the leaf's rate change.
    both = (d0 > 0) & (d1 > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate_base = np.where(both, np.maximum(n0, 0.0) / np.where(both, d0, 1.0) * d1, 0.0)
    rate_actual = np.where(both, np.maximum(n1, 0.0), 0.0)
    # Mix: a leaf's volume against the typical growth of all leaves (the weighted median of
    # per-leaf growth). Comparing shares instead would make every other leaf look shifted
    # when one segment grows, since shares sum to one.
    grows = d0 > 0
    growth = _weighted_median(d1[grows] / d0[grows], d0[grows]) if grows.any() else D1 / D0
    found: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[Hit, set[str]]] = {}
    ranked: list[tuple[Hit, str]] = []
    if len(leaves) >= 3:
        for kind, base, actual in (
            ("rate", rate_base, rate_actual),
            ("mix", growth * np.maximum(d0, 0.0), np.maximum(d1, 0.0)),
        ):
            if ((base > 0) | (actual > 0)).sum() < 3:
                continue
            selected, candidates = localize(cube, base, actual, cfg)
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
        idx = element_leaves(cube, hit.dims, hit.values)
        idx = idx[~claimed[idx]]
        if len(idx) == 0:
            continue
        claimed[idx] = True
        rate, mix, r0, r1 = _ratio_effects(n0, d0, n1, d1, idx)
        contrib = rate + mix
        effect: Literal["rate", "mix", "rate+mix"] = "rate+mix" if len(kinds) == 2 else ("rate" if "rate" in kinds else "mix")
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
                kind=kind,
            )
        )
    listed, unlisted = _largest_first(root_causes, cfg, notes)
    return AttributionResult(
        metric_kind="ratio",
        dimensions=dimensions,
        total_baseline=R0,
        total_actual=R1,
        total_deviation=deviation,
        relative_change=R1 / R0 - 1 if R0 else None,
        root_causes=listed,
        unlisted_root_causes=unlisted,
        explained_share=float(sum(rc.share for rc in root_causes)),
        candidates=cands,
        explanation=_explain_ratio(metric_name, R0, R1, listed, unlisted),
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
        raise ValueError("give either metric_column or both numerator_column and denominator_column")
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
    return attribute_period_leaves(
        merged.reset_index(),
        dimensions,
        baseline_period,
        comparison_period,
        metric_column,
        numerator_column=numerator_column,
        denominator_column=denominator_column,
        normalize_period_length=normalize_period_length,
        config=config,
    )


def attribute_period_leaves(
    leaves: pd.DataFrame,
    dimensions: list[str],
    baseline_period: Period,
    comparison_period: Period,
    metric_column: str | None = None,
    *,
    numerator_column: str | None = None,
    denominator_column: str | None = None,
    normalize_period_length: bool = True,
    config: AttributionConfig | None = None,
    metric_name: str | None = None,
) -> AttributionResult:
    """:func:`attribute_change_between_periods` from the leaf cube already aggregated per period.

    ``leaves`` has the dimension columns and, for each value column ``c``, ``c__base`` and
    ``c__comp``: the sums over the baseline and comparison period (missing means no rows), e.g.
    computed in the source database by one GROUP BY. ``metric_name`` names the metric in the
    explanation (default: its column, or numerator/denominator).
    """
    if (metric_column is None) == (numerator_column is None or denominator_column is None):
        raise ValueError("give either metric_column or both numerator_column and denominator_column")
    value_cols = [metric_column] if metric_column else [numerator_column, denominator_column]
    merged = leaves.copy()
    for suffix in ("__base", "__comp"):
        columns = [f"{c}{suffix}" for c in value_cols]
        missing = [c for c in columns if c not in merged.columns]
        if missing:
            raise ValueError(f"columns not found: {missing}")
        if merged[columns].isna().all(axis=None):
            raise ValueError("one of the periods contains no rows")
        for column in columns:
            merged[column] = pd.to_numeric(merged[column], errors="coerce").fillna(0.0).astype(float)
    notes = [
        f"baseline {baseline_period.start}..{baseline_period.end}, comparison {comparison_period.start}..{comparison_period.end}"
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
            metric_name=metric_name or metric_column,
        )
    else:
        result = attribute_change(
            merged,
            dimensions,
            numerator=(f"{numerator_column}__base", f"{numerator_column}__comp"),
            denominator=(f"{denominator_column}__base", f"{denominator_column}__comp"),
            config=config,
            metric_name=metric_name or f"{numerator_column}/{denominator_column}",
        )
    return result.model_copy(update={"notes": [*notes, *result.notes]})


# --------------------------------------------------------------------------------------------
# Explanations
# --------------------------------------------------------------------------------------------


def _fmt_element(element: dict[str, JsonScalar]) -> str:
    return " & ".join(f"{k}={v}" for k, v in element.items()) or "all segments"


def _fmt_num(x: float) -> str:
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


def _explain_additive(
    metric: str,
    total_f: float,
    total_v: float,
    causes: list[RootCause],
    explained: float,
    unlisted: int,
) -> str:
    change = total_v - total_f
    rel = f" ({change / total_f:+.1%})" if total_f else ""
    head = f"{metric} moved from {_fmt_num(total_f)} to {_fmt_num(total_v)}{rel}."
    if not causes:
        return head + " No segment deviates beyond normal noise; no root cause is asserted."
    parts = []
    for rc in causes:
        rel_e = f", {rc.relative_change:+.0%} vs baseline" if rc.relative_change is not None else ""
        parts.append(f"{_fmt_element(rc.element)} ({_fmt_num(rc.contribution)}{rel_e}; {rc.share:.0%} of the change)")
    total = len(causes) + unlisted
    noun = "root cause explains" if total == 1 else "root causes explain"
    more = f"; and {unlisted} smaller one(s)" if unlisted else ""
    return f"{head} {total} {noun} {explained:.0%} of the change: " + ("; ".join(parts) + more + ".")


def _explain_ratio(metric: str, r0: float, r1: float, causes: list[RootCause], unlisted: int) -> str:
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
    more = f"; and {unlisted} smaller root cause(s)" if unlisted else ""
    return head + " " + "; ".join(parts) + more + "."
