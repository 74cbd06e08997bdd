"""Tests for the ToolOrchestra reward and GRPO advantages (toolorchestra/episodes/reward.py).

Property tests compare against a plain re-implementation of the definition written here, and
check the invariants the trainer relies on: wrong rollouts get 0, constant terms are skipped,
rewards are bounded by the weights, shifting a metric changes nothing, cheaper never scores less.
"""

from __future__ import annotations

import doctest
import math
import statistics

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from toolorchestra.core.errors import OrchestraError
from toolorchestra.episodes import reward as reward_module
from toolorchestra.episodes.reward import (
    DEFAULT_DEAD_BAND,
    NO_DEAD_BAND,
    DeadBand,
    RewardInputError,
    group_advantages,
    group_rewards,
)

TOOLS = ("web_search", "code_interpreter", "expert_llm")
KEYS = ("accuracy", "cost", "latency") + tuple(f"calls/{t}" for t in TOOLS)
SETTINGS = settings(max_examples=150, deadline=None)

# Multiples of 1/64 below 200 are exact in binary floating point, so shifting, negating and
# subtracting them loses nothing and the invariance tests can demand equality. A small pool of
# repeated values makes ties (and so skipped terms) common.
dyadic = st.one_of(
    st.sampled_from([0.0, 0.5, 1.0]), st.integers(0, 64 * 100).map(lambda k: k / 64)
)
weights_st = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False)


def reference_rewards(metrics, correct, preference, dead_band=None):
    """The definition, written as plainly as possible and independently of the module.
    `dead_band`: {"cost" | "latency" | "calls": (absolute, relative)}; None: no band."""
    n = len(metrics)
    out = [0.0] * n
    for key, weight in preference.items():
        if key == "accuracy":
            values = [1.0 if ok else 0.0 for ok in correct]
        elif key.startswith("calls/"):
            values = [float(row.get(key, 0)) for row in metrics]
        else:  # cost, latency: lower is better
            values = [-float(row[key]) for row in metrics]
        lo, hi = min(values), max(values)
        if lo == hi:
            continue
        family = "calls" if key.startswith("calls/") else key
        absolute, relative = (dead_band or {}).get(family, (0.0, 0.0))
        if hi - lo <= max(absolute, relative * max(abs(v) for v in values)):
            continue  # inside the dead band: constant
        for i in range(n):
            if correct[i]:
                out[i] += weight * (values[i] - lo) / (hi - lo)
    return out


@st.composite
def groups(draw, min_size=1, max_size=8, keys=KEYS):
    n = draw(st.integers(min_size, max_size))
    metrics = []
    for _ in range(n):
        row = {"cost": draw(dyadic), "latency": draw(dyadic)}
        for tool in TOOLS:
            if draw(st.booleans()):  # a missing calls/<tool> key means 0 calls
                row[f"calls/{tool}"] = draw(st.integers(0, 4))
        metrics.append(row)
    correct = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    chosen = draw(st.lists(st.sampled_from(keys), min_size=1, unique=True))
    preference = {key: draw(weights_st) for key in chosen}
    return metrics, correct, preference


# ---------------------------------------------------------------------------------------------
# Properties of group_rewards


# Dead bands as (absolute, relative) per key family; the absolute ones are multiples of 1/64 (or a
# hair under one) so ties with a range are common and the boundary is exercised.
band_values = st.tuples(st.sampled_from([0.0, 1 / 64, 0.5, 1.0, 2.0]), st.sampled_from([0.0, 0.01, 0.25]))
dead_bands = st.dictionaries(st.sampled_from(["cost", "latency", "calls"]), band_values, max_size=3)
absolute_bands = st.dictionaries(st.sampled_from(["cost", "latency", "calls"]),
                                 st.tuples(st.sampled_from([0.0, 1 / 64, 0.5, 2.0]), st.just(0.0)), max_size=3)


def as_bands(bands):
    return {k: DeadBand(absolute=a, relative=r) for k, (a, r) in bands.items()}


DEFAULT_BANDS = {k: (b.absolute, b.relative) for k, b in DEFAULT_DEAD_BAND.items()}


@SETTINGS
@given(groups(), dead_bands)
def test_matches_reference_definition(group, bands):
    metrics, correct, preference = group
    assert group_rewards(metrics, correct, preference, as_bands(bands)) == pytest.approx(
        reference_rewards(metrics, correct, preference, bands), abs=1e-9
    )
    assert group_rewards(metrics, correct, preference, NO_DEAD_BAND) == pytest.approx(
        reference_rewards(metrics, correct, preference), abs=1e-9
    )
    assert group_rewards(metrics, correct, preference) == pytest.approx(  # the default bands
        reference_rewards(metrics, correct, preference, DEFAULT_BANDS), abs=1e-9
    )


@SETTINGS
@given(groups(min_size=2), dead_bands)
def test_a_range_inside_the_dead_band_is_skipped_and_one_outside_is_not(group, bands):
    metrics, correct, preference = group
    for key in ("cost", "latency"):
        values = [row[key] for row in metrics]
        span, scale = max(values) - min(values), max(map(abs, values))
        absolute, relative = bands.get(key, (0.0, 0.0))
        with_key = group_rewards(metrics, correct, {**preference, key: 1.0}, as_bands(bands))
        rest = {k: w for k, w in preference.items() if k != key}
        without = group_rewards(metrics, correct, rest, as_bands(bands)) if rest else [0.0] * len(metrics)
        inside = span <= max(absolute, relative * scale)
        assert (with_key == pytest.approx(without, abs=1e-12)) or not inside
        if not inside and any(c and v == min(values) for c, v in zip(correct, values)):
            # A right rollout at the cheapest end gets the key's whole weight on top.
            best = next(i for i, (c, v) in enumerate(zip(correct, values)) if c and v == min(values))
            assert with_key[best] == pytest.approx(without[best] + 1.0, abs=1e-9)


def test_latency_jitter_and_dust_cost_are_no_reward_unit():
    # Before the dead band, 1 ms of jitter or 1e-12 USD was a full reward unit: [1.0, 0.0].
    jitter = [{"latency": 10.0}, {"latency": 10.001}]
    assert group_rewards(jitter, [True, True], {"accuracy": 1.0, "latency": 1.0}) == [0.0, 0.0]
    dust = [{"cost": 3e-12}, {"cost": 4e-12}]
    assert group_rewards(dust, [True, True], {"accuracy": 1.0, "cost": 1.0}) == [0.0, 0.0]
    # Real differences still count, and NO_DEAD_BAND is exact min-max.
    assert group_rewards([{"latency": 10.0}, {"latency": 12.0}], [True, True], {"latency": 1.0}) == [1.0, 0.0]
    assert group_rewards(jitter, [True, True], {"latency": 1.0}, NO_DEAD_BAND) == [1.0, 0.0]
    # Calls are counts: by default one call more is a difference.
    assert group_rewards([{"calls/x": 0}, {"calls/x": 1}], [True, True], {"calls/x": -1.0}) == [0.0, -1.0]


@pytest.mark.parametrize(
    "bands, match",
    [({"accuracy": DeadBand()}, "unknown key 'accuracy'"), ({"cost": (1.0, 0.0)}, "must be a DeadBand"),
     ([("cost", DeadBand())], "must be a mapping")],
)
def test_malformed_dead_band(bands, match):
    with pytest.raises(RewardInputError, match=match):
        group_rewards([{"cost": 1.0}], [True], {"cost": 1.0}, bands)


@pytest.mark.parametrize("kwargs", [{"absolute": -1.0}, {"relative": float("nan")}])
def test_dead_band_rejects_negative_or_non_finite_thresholds(kwargs):
    with pytest.raises(RewardInputError, match="dead band"):
        DeadBand(**kwargs)


@SETTINGS
@given(groups())
def test_wrong_rollouts_get_zero_and_rewards_are_bounded_by_the_weights(group):
    metrics, correct, preference = group
    rewards = group_rewards(metrics, correct, preference)
    assert len(rewards) == len(metrics)
    positive = sum(w for w in preference.values() if w > 0)
    negative = sum(w for w in preference.values() if w < 0)
    total = sum(abs(w) for w in preference.values())
    for r, ok in zip(rewards, correct):
        if not ok:
            assert r == 0.0
        assert negative - 1e-9 <= r <= positive + 1e-9
        assert abs(r) <= total + 1e-9


@SETTINGS
@given(groups())
def test_all_wrong_group_is_all_zero(group):
    metrics, _, preference = group
    assert group_rewards(metrics, [False] * len(metrics), preference) == [0.0] * len(metrics)


@SETTINGS
@given(groups(min_size=1, max_size=1), st.booleans())
def test_single_rollout_group_is_zero(group, ok):
    # Every term is constant in a group of one, so every term is skipped.
    metrics, _, preference = group
    assert group_rewards(metrics, [ok], preference) == [0.0]


@SETTINGS
@given(groups(), st.sampled_from(KEYS[1:]), dyadic)
def test_constant_term_is_skipped(group, key, value):
    metrics, correct, preference = group
    tied = [{**row, key: value} for row in metrics]
    with_key = group_rewards(tied, correct, {**preference, key: 1.0})
    without_key = {k: w for k, w in preference.items() if k != key}
    if without_key:
        assert with_key == group_rewards(tied, correct, without_key)
    else:
        assert with_key == [0.0] * len(metrics)


@SETTINGS
@given(groups(), st.sampled_from(KEYS[1:]), st.integers(-64 * 50, 64 * 50).map(lambda k: k / 64), absolute_bands)
def test_adding_a_constant_to_a_metric_changes_nothing(group, key, shift, bands):
    # Holds with absolute dead bands (a relative band depends on the magnitude, by design).
    metrics, correct, preference = group
    if key.startswith("calls/"):
        shift = float(round(shift))  # call counts shift by whole calls
    shifted = [{**row, key: row.get(key, 0) + shift} for row in metrics]
    assert group_rewards(shifted, correct, preference, as_bands(bands)) == group_rewards(
        metrics, correct, preference, as_bands(bands)
    )


@SETTINGS
@given(
    groups(min_size=2),
    st.sampled_from(["cost", "latency"]),
    st.floats(0.01, 5.0),
    st.data(),
)
def test_cheaper_correct_rollout_never_gets_less(group, key, weight, data):
    metrics, correct, preference = group
    i = data.draw(st.integers(0, len(metrics) - 1))
    correct = [*correct[:i], True, *correct[i + 1 :]]
    preference = {**preference, key: weight}
    cut = data.draw(st.integers(1, 64 * 50).map(lambda k: k / 64))
    cheaper = [dict(row) for row in metrics]
    cheaper[i][key] -= cut  # all else equal
    before = group_rewards(metrics, correct, preference)[i]
    after = group_rewards(cheaper, correct, preference)[i]
    assert after >= before


@SETTINGS
@given(groups(min_size=2), st.floats(0.01, 5.0))
def test_avoided_tool_lowers_reward_of_using_it(group, weight):
    # "Do not use web search": a negative weight on calls/web_search.
    metrics, _, _ = group
    correct = [True] * len(metrics)
    preference = {"calls/web_search": -weight}
    calls = [row.get("calls/web_search", 0) for row in metrics]
    rewards = group_rewards(metrics, correct, preference)
    for a in range(len(metrics)):
        for b in range(len(metrics)):
            if calls[a] < calls[b]:
                assert rewards[a] > rewards[b]
            elif calls[a] == calls[b]:
                assert rewards[a] == rewards[b]


# ---------------------------------------------------------------------------------------------
# Worked cases and decisions of group_rewards


def test_normalisation_spans_all_rollouts_not_only_correct_ones():
    # The wrong rollout is the cheapest, so it sets the low end of the cost scale: the $2 right
    # rollout is halfway (0.5), not at the top (1.0, which normalising over correct ones gives).
    metrics = [{"cost": 2.0}, {"cost": 3.0}, {"cost": 1.0}]
    assert group_rewards(metrics, [True, True, False], {"cost": 1.0}) == [0.5, 0.0, 0.0]


def test_accuracy_term():
    assert group_rewards([{}, {}], [True, False], {"accuracy": 1.0}) == [1.0, 0.0]
    # All right: accuracy is constant, so it is skipped and nothing separates the rollouts.
    assert group_rewards([{}, {}], [True, True], {"accuracy": 1.0}) == [0.0, 0.0]


def test_accuracy_comes_from_correct_not_from_metrics():
    metrics = [{"accuracy": 0.0}, {"accuracy": 1.0}]
    assert group_rewards(metrics, [True, False], {"accuracy": 2.0}) == [2.0, 0.0]


def test_cost_and_latency_are_negated_and_combined():
    metrics = [
        {"cost": 1.0, "latency": 30.0, "calls/web_search": 3},
        {"cost": 3.0, "latency": 10.0},
        {"cost": 5.0, "latency": 20.0, "calls/web_search": 1},
    ]
    preference = {"accuracy": 1.0, "cost": 0.5, "latency": 0.25, "calls/web_search": -1.0}
    rewards = group_rewards(metrics, [True, True, True], preference)
    # accuracy constant (skipped); cost m = 1, .5, 0; latency m = 0, 1, .5; calls m = 1, 0, 1/3
    assert rewards == pytest.approx([0.5 - 1.0, 0.25 + 0.25, 0.125 - 1 / 3])


def test_missing_calls_key_counts_as_zero():
    metrics = [{"calls/web_search": 2}, {}]
    assert group_rewards(metrics, [True, True], {"calls/web_search": 1.0}) == [1.0, 0.0]


def test_model_keys_count_calls_default_to_zero_and_use_the_calls_dead_band():
    from toolorchestra.episodes.reward import DeadBand

    metrics = [{"models/smollm2-vote5": 1}, {}, {"models/smollm2-vote5": 2}]
    # "do not ask the vote expert": the rollout that never asked it scores highest
    assert group_rewards(metrics, [True] * 3, {"models/smollm2-vote5": -1.0}) == [-0.5, 0.0, -1.0]
    # the `calls` band covers model counts too: a band of 1 call makes a 1-call spread constant
    wide = {"calls": DeadBand(absolute=1.0)}
    assert group_rewards(metrics[:2], [True, True], {"models/smollm2-vote5": -1.0}, dead_band=wide) == [0.0, 0.0]


def test_unweighted_metrics_are_not_read():
    # No cost anywhere and a NaN latency, but the preference weights neither.
    metrics = [{"latency": math.nan}, {}]
    assert group_rewards(metrics, [True, False], {"accuracy": 1.0}) == [1.0, 0.0]


def test_empty_group():
    assert group_rewards([], [], {"accuracy": 1.0}) == []


def test_accepts_numpy_like_bools_and_ints():
    assert group_rewards([{"cost": 1}, {"cost": 2}], [1, 0], {"accuracy": 1}) == [1.0, 0.0]


# ---------------------------------------------------------------------------------------------
# Bad input to group_rewards


@pytest.mark.parametrize("key", ["cost", "latency"])
def test_missing_cost_or_latency_names_rollout_and_key(key):
    metrics = [{"cost": 1.0, "latency": 1.0}, {"cost": 1.0, "latency": 1.0}]
    del metrics[1][key]
    with pytest.raises(RewardInputError, match=rf"metrics\[1\] has no '{key}' value"):
        group_rewards(metrics, [True, True], {key: 1.0})


def test_missing_cost_is_reported_even_when_every_rollout_is_wrong():
    with pytest.raises(ValueError, match=r"metrics\[0\] has no 'cost'"):
        group_rewards([{}], [False], {"cost": 1.0})


def test_length_mismatch():
    with pytest.raises(ValueError, match="2 rollout.*correct has 1"):
        group_rewards([{}, {}], [True], {"accuracy": 1.0})


@pytest.mark.parametrize("key", ["acc", "Cost", "calls/", "models/", "tokens", "calls_web_search", "model/x"])
def test_unknown_preference_key_lists_accepted_forms(key):
    with pytest.raises(ValueError, match="accepted forms are 'accuracy', 'cost', 'latency'"):
        group_rewards([{}], [True], {key: 1.0})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_rejected(bad):
    with pytest.raises(ValueError, match=r"metrics\[1\]\['cost'\] must be finite"):
        group_rewards([{"cost": 1.0}, {"cost": bad}], [True, True], {"cost": 1.0})
    with pytest.raises(ValueError, match=r"metrics\[0\]\['calls/x'\] must be finite"):
        group_rewards([{"calls/x": bad}], [True], {"calls/x": 1.0})
    with pytest.raises(ValueError, match=r"preference\['accuracy'\] must be finite"):
        group_rewards([{}], [True], {"accuracy": bad})


@pytest.mark.parametrize(
    ("metrics", "correct", "preference", "match"),
    [
        ([{"cost": "1.0"}], [True], {"cost": 1.0}, r"metrics\[0\]\['cost'\] must be a number"),
        ([{"cost": True}], [True], {"cost": 1.0}, "must be a number, got bool"),
        ([{}], ["False"], {"accuracy": 1.0}, r"correct\[0\] must be a bool"),
        ([{}], [2], {"accuracy": 1.0}, r"correct\[0\] must be a bool"),
        ([{}], [True], {}, "preference is empty"),
        ([{}], [True], {"accuracy": None}, "must be a number"),
        ({"cost": 1.0}, [True], {"cost": 1.0}, "one mapping per rollout"),
        ([[("cost", 1.0)]], [True], {"cost": 1.0}, r"metrics\[0\] must be a mapping"),
    ],
)
def test_malformed_input(metrics, correct, preference, match):
    with pytest.raises(RewardInputError, match=match) as info:
        group_rewards(metrics, correct, preference)
    # One-line errors for the CLI, and still a ValueError for generic callers.
    assert isinstance(info.value, OrchestraError)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------------------------
# group_advantages

rewards_st = st.lists(st.floats(-10.0, 10.0, allow_nan=False), min_size=0, max_size=16)


def reference_advantages(rewards, clip, min_std):
    if len(rewards) < 2:
        return None
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    if std <= min_std:
        return None
    return [max(-clip, min(clip, (r - mean) / (std + 1e-6))) for r in rewards]


@SETTINGS
@given(rewards_st, st.floats(0.1, 5.0), st.floats(0.0, 2.0))
def test_advantages_match_reference(rewards, clip, min_std):
    got = group_advantages(rewards, clip=clip, min_std=min_std)
    want = reference_advantages(rewards, clip, min_std)
    if want is None or got is None:
        # The two std computations may round differently right at the min_std boundary, and a
        # spread whose square underflows (subnormal rewards) is zero in floats but not in fractions.
        if len(rewards) >= 2:
            assume(not math.isclose(statistics.stdev(rewards), min_std, rel_tol=1e-9))
            assume(statistics.stdev(rewards) > 1e-150)
        assert got is want is None
    else:
        assert got == pytest.approx(want, abs=1e-9)


@SETTINGS
@given(rewards_st, st.floats(0.1, 5.0))
def test_advantages_are_clipped_and_signed_like_r_minus_mean(rewards, clip):
    adv = group_advantages(rewards, clip=clip, min_std=0.0)
    assume(adv is not None)
    mean = statistics.fmean(rewards)
    for r, a in zip(rewards, adv):
        assert -clip <= a <= clip
        if abs(r - mean) > 1e-9:
            assert math.copysign(1.0, a) == math.copysign(1.0, r - mean)
            assert a != 0.0


@SETTINGS
@given(rewards_st)
def test_advantages_have_zero_mean_when_not_clipped(rewards):
    adv = group_advantages(rewards, clip=1e9, min_std=0.0)
    assume(adv is not None)
    assert math.fsum(adv) == pytest.approx(0.0, abs=1e-7 * len(adv))
    if statistics.stdev(rewards) >= 0.1:
        # Unit sample std, up to the 1e-6 added to the denominator.
        assert statistics.stdev(adv) == pytest.approx(1.0, rel=2e-5)


@pytest.mark.parametrize("rewards", [[], [1.0], [0.5, 0.5, 0.5], [0.0, 0.1], [1.0, 1.05, 1.1]])
def test_filtered_groups_return_none(rewards):
    # [0, 0.1] has std 0.0707 and [1, 1.05, 1.1] std 0.05: both under the default min_std 0.1.
    assert group_advantages(rewards) is None


def test_min_std_boundary_is_inclusive():
    rewards = [0.0, 1.0, 2.0]  # sample std exactly 1.0
    assert group_advantages(rewards, min_std=1.0) is None
    assert group_advantages(rewards, min_std=0.999) is not None


def test_binary_group_and_clipping():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0])
    assert adv == pytest.approx([1.5, -0.5, -0.5, -0.5], rel=1e-5)
    # One success in 20: its z-score is 4.25, clipped to the default 3.
    adv = group_advantages([1.0] + [0.0] * 19)
    assert adv[0] == 3.0
    assert adv[1] == pytest.approx(-0.2236, abs=1e-4)


@pytest.mark.parametrize(
    ("rewards", "kwargs", "match"),
    [
        ([0.0, math.nan], {}, r"rewards\[1\] must be finite"),
        ([0.0, math.inf], {}, r"rewards\[1\] must be finite"),
        ([0.0, 1.0], {"clip": 0.0}, "clip must be > 0"),
        ([0.0, 1.0], {"min_std": -0.1}, "min_std must be >= 0"),
        ([1.7e308, -1.7e308], {}, "too large to standardise"),
    ],
)
def test_advantages_bad_input(rewards, kwargs, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, **kwargs)


def test_all_correct_identical_group_is_filtered_end_to_end():
    # Every rollout right and alike: no term separates them, so the group gives no gradient.
    metrics = [{"cost": 1.0, "latency": 2.0}] * 4
    rewards = group_rewards(metrics, [True] * 4, {"accuracy": 1.0, "cost": 1.0, "latency": 1.0})
    assert group_advantages(rewards) is None


def test_doctests_in_module_docstring():
    result = doctest.testmod(reward_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5
    assert result.failed == 0
