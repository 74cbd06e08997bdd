"""The promotion gate: refuses a less accurate or too expensive candidate and says why."""

from __future__ import annotations

import pytest

from toolorchestra.registry.gate import GateConfig, Scores, decide, pooled_scores

CHAMPION = Scores(accuracy=0.60, cost_mean=0.010, format_valid_rate=1.0, n=40)


def scores(accuracy=0.6, cost=0.01, valid=1.0, n=40):
    return Scores(accuracy=accuracy, cost_mean=cost, format_valid_rate=valid, n=n)


def test_less_accurate_candidate_is_refused_with_the_reason():
    decision = decide(scores(accuracy=0.55, cost=0.002), CHAMPION, GateConfig(accuracy_tolerance=0.02))
    assert not decision.promote and decision.failed == ["accuracy"]
    assert any(r.startswith("failed: accuracy 0.550 vs champion 0.600") for r in decision.reasons)
    assert any(r.startswith("passed: mean cost") for r in decision.reasons)


def test_too_expensive_candidate_is_refused_with_the_reason():
    decision = decide(scores(accuracy=0.7, cost=0.013), CHAMPION, GateConfig(max_cost_ratio=1.2))
    assert not decision.promote and decision.failed == ["cost"]
    assert any("failed: mean cost $0.013 vs champion $0.01 (ratio 1.3, allowed <= 1.2)" in r for r in decision.reasons)


@pytest.mark.parametrize(("accuracy", "cost", "tolerance", "ratio", "promote"), [
    (0.59, 0.010, 0.02, 1.0, True),    # within the accuracy tolerance, same cost
    (0.57, 0.010, 0.02, 1.0, False),   # beyond it
    (0.60, 0.012, 0.0, 1.2, True),     # 20% dearer, allowed
    (0.60, 0.0121, 0.0, 1.2, False),
    (0.90, 0.001, 0.0, 1.0, True),
])
def test_gate_table(accuracy, cost, tolerance, ratio, promote):
    config = GateConfig(accuracy_tolerance=tolerance, max_cost_ratio=ratio)
    assert decide(scores(accuracy, cost), CHAMPION, config).promote is promote


def test_first_promotion_without_champion_only_needs_the_floors():
    first = decide(scores(accuracy=0.1, cost=5.0), None, GateConfig())
    assert first.promote and first.first_promotion and first.reasons[0] == "first promotion: there is no champion yet"
    floored = decide(scores(accuracy=0.1, valid=0.5), None, GateConfig(min_accuracy=0.2, min_format_valid_rate=0.9))
    assert not floored.promote and floored.failed == ["min_accuracy", "min_format_valid_rate"]
    assert not decide(scores(n=0), None, GateConfig()).promote


def test_a_free_champion_admits_only_a_free_candidate():
    free = scores(accuracy=0.5, cost=0.0)
    assert decide(scores(accuracy=0.5, cost=0.0), free, GateConfig()).promote
    assert decide(scores(accuracy=0.5, cost=1e-6), free, GateConfig(max_cost_ratio=10)).failed == ["cost"]


def test_pooled_scores_weight_benchmarks_by_tasks():
    per = {"a": {"n": 10, "accuracy": 1.0, "cost_mean": 0.1, "format_valid_rate": 1.0, "latency_mean": 1.0},
           "b": {"n": 30, "accuracy": 0.0, "cost_mean": 0.5, "format_valid_rate": 0.5, "latency_mean": 3.0},
           "overall": {"n": 40, "accuracy": 0.25, "cost_mean": 0.4, "format_valid_rate": 0.625, "latency_mean": 2.5}}
    assert pooled_scores(per, None).accuracy == 0.25
    both = pooled_scores(per, ["a", "b"])
    assert both.n == 40 and both.accuracy == pytest.approx(0.25) and both.cost_mean == pytest.approx(0.4)
    assert pooled_scores(per, ["a"]).accuracy == 1.0
    with pytest.raises(KeyError, match="not in the evaluation"):
        pooled_scores(per, ["c"])
