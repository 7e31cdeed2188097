"""Root-cause attribution: known answers on generated data, small cubes and benchmark-style ones."""

from __future__ import annotations

import gzip
import itertools
import json
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agent_core.analytics.attribution import (
    AttributionResult,
    Period,
    attribute_change,
    attribute_change_between_periods,
)
from agent_core.analytics.rca_benchmark import make_rca_case
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace
from agent_core.tools.analytics_tools import AttributeChangeInput, AttributeChangeTool

DIMS = ["region", "channel", "device"]
REGIONS = ["East", "West", "North", "South", "Central"]
CHANNELS = ["app", "web", "store", "partner"]
DEVICES = ["ios", "android", "pc"]


def _as_set(elements: list[dict]) -> set[frozenset]:
    return {frozenset((k, str(v)) for k, v in e.items()) for e in elements}


def _leaf_table(seed: int, noise: float = 0.02) -> pd.DataFrame:
    """Forecast vs actual per region x channel x device, with multiplicative noise."""
    rng = np.random.default_rng(seed)
    rows = [
        {"region": r, "channel": c, "device": d, "predict": float(rng.lognormal(6, 0.8))}
        for r in REGIONS
        for c in CHANNELS
        for d in DEVICES
    ]
    df = pd.DataFrame(rows)
    df["real"] = df["predict"] * (1 + rng.normal(0, noise, len(df)))
    return df


def _funnel(seed: int) -> pd.DataFrame:
    """Visits and orders per leaf in two periods; each channel has its own conversion rate."""
    rng = np.random.default_rng(seed)
    rate = {"app": 0.06, "web": 0.03, "store": 0.09, "partner": 0.02}
    rows = []
    for r in REGIONS:
        for c in CHANNELS:
            for d in DEVICES:
                visits = float(rng.integers(20_000, 40_000))
                rows.append(
                    {
                        "region": r,
                        "channel": c,
                        "device": d,
                        "visits_base": visits,
                        "visits_cur": visits * (1 + rng.normal(0, 0.01)),
                        "rate_base": rate[c] * (1 + rng.normal(0, 0.01)),
                        "rate_cur": rate[c] * (1 + rng.normal(0, 0.01)),
                    }
                )
    return pd.DataFrame(rows)


def _with_orders(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["orders_base"] = df["visits_base"] * df["rate_base"]
    df["orders_cur"] = df["visits_cur"] * df["rate_cur"]
    return df


# ------------------------------------------------------------------------------------------
# Additive metrics
# ------------------------------------------------------------------------------------------


def test_single_dimension_root_cause_ranked_first() -> None:
    df = _leaf_table(1)
    df.loc[df["region"] == "East", "real"] *= 0.6
    result = attribute_change(df, DIMS, "predict", "real")
    assert [rc.element for rc in result.root_causes] == [{"region": "East"}]
    assert result.candidates[0].element == {"region": "East"}
    assert result.candidates[0].selected
    assert result.root_causes[0].share == pytest.approx(1.0, abs=0.1)
    assert result.root_causes[0].relative_change == pytest.approx(-0.4, abs=0.03)
    assert "region=East" in result.explanation


def test_two_dimensional_root_causes() -> None:
    df = _leaf_table(2)
    east_app = (df["region"] == "East") & (df["channel"] == "app")
    west_web = (df["region"] == "West") & (df["channel"] == "web")
    df.loc[east_app, "real"] *= 0.5
    df.loc[west_web, "real"] *= 0.7
    result = attribute_change(df, DIMS, "predict", "real")
    assert _as_set([rc.element for rc in result.root_causes]) == _as_set(
        [{"region": "East", "channel": "app"}, {"region": "West", "channel": "web"}]
    )
    # The stronger cause comes first, and the shares add up to (about) the whole change.
    assert result.root_causes[0].element == {"region": "East", "channel": "app"}
    assert result.explained_share == pytest.approx(1.0, abs=0.15)


def test_no_deviation_asserts_nothing() -> None:
    result = attribute_change(_leaf_table(3), DIMS, "predict", "real")
    assert result.root_causes == []
    assert "no root cause" in result.explanation.lower()


# ------------------------------------------------------------------------------------------
# The ripple effect: a parent whose children all moved alike is named, not its children
# ------------------------------------------------------------------------------------------

CATEGORIES = ["food", "toys", "home", "books", "sport", "beauty"]
DIMS4 = [*DIMS, "category"]


def _forecast_cube(seed: int) -> tuple[pd.DataFrame, np.random.Generator]:
    """720 leaves, heavy-tailed, 30 % of them empty; the forecast is off by 5 % on every leaf."""
    rng = np.random.default_rng(seed)
    combinations = itertools.product(REGIONS, CHANNELS, DEVICES, CATEGORIES)
    df = pd.DataFrame(list(combinations), columns=DIMS4)
    truth = rng.lognormal(4, 1.5, len(df))
    truth[rng.random(len(df)) < 0.3] = 0.0
    df["predict"] = truth * (1 + rng.normal(0, 0.05, len(df)))
    df["real"] = truth
    return df, rng


def _moved(df: pd.DataFrame, rng: np.random.Generator, mask: pd.Series, factor: float) -> None:
    """Every leaf under ``mask`` moves by the same relative amount (1 % jitter)."""
    df.loc[mask, "real"] *= factor * (1 + rng.normal(0, 0.01, int(mask.sum())))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_overlapping_parents_of_different_dimensions_are_named(seed: int) -> None:
    # East fell 40 % and web 70 %, on all their leaves (East & web under both): two elements of
    # different cuboids. Their children (East & app, North & web, ...) each moved alike too, and
    # one cuboid of them covers both causes, but naming them would take eight elements.
    df, rng = _forecast_cube(seed)
    _moved(df, rng, df["region"] == "East", 0.6)
    _moved(df, rng, df["channel"] == "web", 0.3)
    result = attribute_change(df, DIMS4, "predict", "real")
    assert _as_set([rc.element for rc in result.root_causes]) == _as_set([{"region": "East"}, {"channel": "web"}])
    changes = {next(iter(rc.element.values())): rc.relative_change for rc in result.root_causes}
    assert changes["web"] == pytest.approx(-0.7, abs=0.03)
    assert changes["East"] == pytest.approx(-0.4, abs=0.05)  # its web leaves are counted under web


def test_a_layer_two_parent_is_named_beside_a_cause_sharing_its_dimension() -> None:
    # The shape of the B0 miss: two layer-2 causes sharing a dimension (channel); every
    # device and category under each moved alike, so the answer is the two layer-2 elements.
    df, rng = _forecast_cube(4)
    _moved(df, rng, (df["region"] == "North") & (df["channel"] == "app"), 0.4)
    _moved(df, rng, (df["category"] == "toys") & (df["channel"] == "app"), 0.0)
    result = attribute_change(df, DIMS4, "predict", "real")
    assert _as_set([rc.element for rc in result.root_causes]) == _as_set(
        [{"region": "North", "channel": "app"}, {"channel": "app", "category": "toys"}]
    )
    assert all(not c.selected for c in result.candidates if len(c.element) > 2)


# ------------------------------------------------------------------------------------------
# Real cases of the published benchmark (Squeeze B0, development split) through the tool
# ------------------------------------------------------------------------------------------

B0 = Path(__file__).parent / "data" / "squeeze_b0"


@pytest.mark.parametrize("case", sorted(json.loads((B0 / "truth.json").read_text())))
async def test_real_b0_cases_through_the_tool_find_exactly_the_injected_root_causes(case: str, tmp_path: Path) -> None:
    # Three cases of the B0 dev split (the leaves empty in both columns left out): root causes
    # in different cuboids of layer 1, 2 and 3, a forecast with error on every leaf.
    truth = json.loads((B0 / "truth.json").read_text())[case]
    ctx = RunContext(thread_id="b0", data_dir=tmp_path, channel="cli", user="operator")
    await conversation_workspace(ctx).write("/data/case.csv", gzip.decompress((B0 / case).read_bytes()).decode())
    args = AttributeChangeInput(
        data_file="/data/case.csv", dimensions=["a", "b", "c", "d"], baseline_column="predict", actual_column="real"
    )
    result = await AttributeChangeTool().run(args, ctx)
    found = {"&".join(f"{k}={v}" for k, v in sorted(rc.element.items())) for rc in result.root_causes}
    assert found == set(truth)
    assert result.unlisted_root_causes == 0


# ------------------------------------------------------------------------------------------
# Benchmark-style cubes: 5 x 40 x 10 x 10 leaves, half of them empty, a noisy forecast
# ------------------------------------------------------------------------------------------


def _found(case_leaves: pd.DataFrame, dimensions: list[str]) -> AttributionResult:
    return attribute_change(case_leaves, dimensions, "predict", "real")


@pytest.mark.parametrize("noise", [0.0, 0.1, 0.25])
def test_two_values_of_one_dimension_are_the_whole_answer(noise: float) -> None:
    # a=a2 went to zero and a=a3 fell 60 %: the answer is those two elements, not the hundreds
    # of deeper combinations under them (every leaf below them moved too).
    case = make_rca_case(5, noise=noise, root_causes=[{"a": "a2"}, {"a": "a3"}], magnitudes=[-1.0, -0.6])
    result = _found(case.leaves, case.dimensions)
    assert _as_set([rc.element for rc in result.root_causes]) == _as_set([{"a": "a2"}, {"a": "a3"}])
    assert [rc.layer for rc in result.root_causes] == [1, 1]
    by_element = {frozenset(rc.element.items()): rc for rc in result.root_causes}
    assert by_element[frozenset({("a", "a2")})].relative_change == pytest.approx(-1.0)
    assert by_element[frozenset({("a", "a3")})].relative_change == pytest.approx(-0.6, abs=0.05)
    assert result.explained_share == pytest.approx(1.0, abs=0.05)
    assert "a=a2" in result.explanation and "a=a3" in result.explanation


def test_layer_two_causes_in_one_cuboid() -> None:
    causes = [{"a": "a1", "d": "d6"}, {"a": "a4", "d": "d6"}]
    case = make_rca_case(9, noise=0.1, root_causes=causes, magnitudes=[-0.5, 0.8])
    result = _found(case.leaves, case.dimensions)
    assert _as_set([rc.element for rc in result.root_causes]) == _as_set(causes)
    assert {rc.layer for rc in result.root_causes} == {2}


def test_random_benchmark_cases_are_mostly_exact() -> None:
    # One random case per layer and element count at moderate noise: the answer is scored
    # element by element as in the published benchmarks (micro-F1).
    tp = fp = fn = 0
    for layer in (1, 2, 3):
        for n_elements in (1, 2, 3):
            case = make_rca_case(40_000 + 10 * layer + n_elements, layer, n_elements, noise=0.05)
            found = _as_set([rc.element for rc in _found(case.leaves, case.dimensions).root_causes])
            truth = _as_set(case.root_causes)
            tp, fp, fn = tp + len(found & truth), fp + len(found - truth), fn + len(truth - found)
    assert 2 * tp / (2 * tp + fp + fn) >= 0.9


def test_pure_noise_asserts_nothing() -> None:
    case = make_rca_case(11, noise=0.25, root_causes=[], magnitudes=[])
    result = _found(case.leaves, case.dimensions)
    assert result.root_causes == []
    assert "no root cause" in result.explanation.lower()


def test_at_most_ten_root_causes_are_listed() -> None:
    causes = [{"a": f"a{1 + i % 5}", "b": f"b{1 + 3 * i}"} for i in range(13)]
    case = make_rca_case(3, noise=0.0, root_causes=causes, magnitudes=[-1.0] * 13)
    result = _found(case.leaves, case.dimensions)
    assert len(result.root_causes) == 10
    assert result.unlisted_root_causes >= 1
    listed = _as_set([rc.element for rc in result.root_causes])
    assert listed <= _as_set(causes)
    contributions = [abs(rc.contribution) for rc in result.root_causes]
    assert contributions == sorted(contributions, reverse=True)  # the largest are kept
    assert any(f"{result.unlisted_root_causes} more root cause" in note for note in result.notes)
    assert f"and {result.unlisted_root_causes} smaller" in result.explanation


def test_a_launched_segment_is_a_root_cause() -> None:
    # A channel with no baseline at all cannot be scaled from its forecast: it appeared.
    df = _leaf_table(21)
    rng = np.random.default_rng(1)
    launched = pd.DataFrame(
        [
            {"region": r, "channel": "live", "device": d, "predict": 0.0, "real": float(rng.lognormal(6, 0.8))}
            for r in REGIONS
            for d in DEVICES
        ]
    )
    result = attribute_change(pd.concat([df, launched], ignore_index=True), DIMS, "predict", "real")
    assert [rc.element for rc in result.root_causes] == [{"channel": "live"}]
    assert result.root_causes[0].share == pytest.approx(1.0, abs=0.05)


def test_candidates_are_ranked_and_result_serializes() -> None:
    df = _leaf_table(4)
    df.loc[df["channel"] == "store", "real"] *= 1.5
    result = attribute_change(df, DIMS, "predict", "real")
    scores = [c.score for c in result.candidates]
    assert scores == sorted(scores, reverse=True)
    assert len(result.candidates) >= len(result.root_causes)
    round_trip = AttributionResult.model_validate(json.loads(result.model_dump_json()))
    assert round_trip == result


def test_invalid_arguments() -> None:
    df = _leaf_table(5)
    with pytest.raises(ValueError, match="columns not found"):
        attribute_change(df, ["region", "nope"], "predict", "real")
    with pytest.raises(ValueError, match="baseline_column"):
        attribute_change(df, DIMS)
    with pytest.raises(ValueError, match="both numerator and denominator"):
        attribute_change(df, DIMS, numerator=("predict", "real"))


# ------------------------------------------------------------------------------------------
# Ratio metrics: rate effect vs mix effect
# ------------------------------------------------------------------------------------------


def _ratio(df: pd.DataFrame) -> AttributionResult:
    return attribute_change(
        df,
        DIMS,
        numerator=("orders_base", "orders_cur"),
        denominator=("visits_base", "visits_cur"),
        metric_name="conversion rate",
    )


def test_share_grew_rate_unchanged_is_a_mix_effect() -> None:
    df = _funnel(6)
    store = df["channel"] == "store"  # the highest-converting channel
    df.loc[store, "visits_cur"] *= 2.5
    result = _ratio(_with_orders(df))
    assert [rc.element for rc in result.root_causes] == [{"channel": "store"}]
    cause = result.root_causes[0]
    assert cause.effect == "mix"
    assert cause.mix_effect > 0 and abs(cause.mix_effect) > 5 * abs(cause.rate_effect)
    assert cause.share == pytest.approx(1.0, abs=0.1)
    assert result.total_deviation > 0


def test_rate_changed_share_unchanged_is_a_rate_effect() -> None:
    df = _funnel(7)
    east_app = (df["region"] == "East") & (df["channel"] == "app")
    df.loc[east_app, "rate_cur"] *= 0.5
    result = _ratio(_with_orders(df))
    assert [rc.element for rc in result.root_causes] == [{"region": "East", "channel": "app"}]
    cause = result.root_causes[0]
    assert cause.effect == "rate"
    assert cause.rate_effect < 0 and abs(cause.rate_effect) > 5 * abs(cause.mix_effect)
    assert cause.relative_change == pytest.approx(-0.5, abs=0.03)
    assert "its own ratio changed" in result.explanation


def test_ratio_decomposition_is_exact() -> None:
    # Without noise, one segment explains the whole ratio change, split into rate + mix.
    df = _funnel(8)
    for col in ("visits_cur", "rate_cur"):
        df[col] = df[col.replace("cur", "base")]
    web = df["channel"] == "web"
    df.loc[web, "visits_cur"] *= 1.8
    df.loc[web, "rate_cur"] *= 1.3
    result = _ratio(_with_orders(df))
    assert [rc.element for rc in result.root_causes] == [{"channel": "web"}]
    cause = result.root_causes[0]
    assert cause.effect == "rate+mix"
    assert cause.rate_effect + cause.mix_effect == pytest.approx(result.total_deviation, rel=1e-9)
    assert cause.share == pytest.approx(1.0, rel=1e-9)


# ------------------------------------------------------------------------------------------
# Input B: a long table and two periods
# ------------------------------------------------------------------------------------------


def _daily_long_table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    days = pd.date_range("2024-05-01", "2024-05-21", freq="D")
    rows = []
    for day in days:
        for r in REGIONS:
            for c in CHANNELS:
                gmv = 1000 * (2 if c == "app" else 1) * (1 + rng.normal(0, 0.03))
                if day >= pd.Timestamp("2024-05-15") and r == "North" and c == "web":
                    gmv *= 0.4
                rows.append({"day": day, "region": r, "channel": c, "gmv": gmv})
    return pd.DataFrame(rows)


def test_two_periods_long_table() -> None:
    df = _daily_long_table(9)
    result = attribute_change_between_periods(
        df,
        "day",
        ["region", "channel"],
        baseline_period=Period(start=date(2024, 5, 8), end=date(2024, 5, 14)),
        comparison_period=Period(start=date(2024, 5, 15), end=date(2024, 5, 21)),
        metric_column="gmv",
    )
    assert [rc.element for rc in result.root_causes] == [{"region": "North", "channel": "web"}]
    assert result.root_causes[0].relative_change == pytest.approx(-0.6, abs=0.05)
    assert result.total_deviation < 0
    assert any("baseline 2024-05-08..2024-05-14" in note for note in result.notes)


def test_two_periods_of_different_lengths_are_rescaled() -> None:
    df = _daily_long_table(10)
    result = attribute_change_between_periods(
        df,
        "day",
        ["region", "channel"],
        baseline_period=Period(start=date(2024, 5, 1), end=date(2024, 5, 14)),
        comparison_period=Period(start=date(2024, 5, 15), end=date(2024, 5, 21)),
        metric_column="gmv",
    )
    assert any("rescaled" in note for note in result.notes)
    assert [rc.element for rc in result.root_causes] == [{"region": "North", "channel": "web"}]
    # Per-day basis: the untouched segments do not look like a 50 % drop.
    assert result.relative_change == pytest.approx(-0.6 * 1000 / 25_000, abs=0.01)


def test_two_periods_ratio_metric() -> None:
    rng = np.random.default_rng(11)
    rows = []
    for day in pd.date_range("2024-06-01", "2024-06-14", freq="D"):
        for r in REGIONS:
            for c in CHANNELS:
                visits = 5000 * (1 + rng.normal(0, 0.02))
                rate = 0.05 * (0.5 if day.day > 7 and r == "South" else 1.0)
                orders = visits * rate
                rows.append({"day": day, "region": r, "channel": c, "visits": visits, "orders": orders})
    result = attribute_change_between_periods(
        pd.DataFrame(rows),
        "day",
        ["region", "channel"],
        baseline_period=Period(start=date(2024, 6, 1), end=date(2024, 6, 7)),
        comparison_period=Period(start=date(2024, 6, 8), end=date(2024, 6, 14)),
        numerator_column="orders",
        denominator_column="visits",
    )
    assert result.metric_kind == "ratio"
    assert [rc.element for rc in result.root_causes] == [{"region": "South"}]
    assert result.root_causes[0].effect == "rate"


def test_period_validation() -> None:
    with pytest.raises(ValueError):
        Period(start=date(2024, 1, 2), end=date(2024, 1, 1))
