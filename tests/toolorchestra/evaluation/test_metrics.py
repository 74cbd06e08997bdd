"""Metrics: accuracy / cost / latency per method and benchmark, and preference adherence."""

from __future__ import annotations

import pytest

from toolorchestra.evaluation.metrics import (
    TaskRecord,
    adherence_checks,
    intent_followed,
    proportion_interval,
    summarize,
    wilson_interval,
)


def record(method="m", bench="b", key="b/t1", variant="plain", correct=True, cost=0.01, latency=1.0, calls=None,
           intents=None, offered=("web_search", "answer"), kind_="cost", valid=True, trajectory=None):
    return TaskRecord(method=method, benchmark=bench, task_id=key.split("/", 1)[1], key=key, kind="qa",
                      variant=variant, preference_kind=kind_ if intents else None, intents=intents or [],
                      correct=correct, answered=True, format_valid=valid, cost_usd=cost, latency_s=latency, turns=1,
                      tool_calls=calls or {}, offered_tools=list(offered), trajectory=trajectory or {})


@pytest.mark.parametrize(("key", "prefer", "value", "neutral", "followed"), [
    ("calls/web_search", "lower", 0, 0, None),      # neither run called it: untestable, no free credit
    ("calls/web_search", "lower", 1, 0, False),     # called it only when told not to: violated
    ("calls/web_search", "lower", 0, 1, True),
    ("cost", "lower", 0.0, 0.0, None),              # both free: nothing to lower
    ("calls/web_search", "lower", 1, 2, True),      # called less than without the instruction
    ("calls/web_search", "lower", 2, 2, False),
    ("calls/answer", "higher", 0, 0, False),        # asked to use it, never did
    ("calls/answer", "higher", 1, 1, True),
    ("calls/answer", "higher", 1, 2, False),
    ("cost", "lower", 0.0099, 0.01, False),         # within the 5% noise margin: unchanged
    ("cost", "lower", 0.009, 0.01, True),
    ("latency", "lower", 0.0, 3.0, True),
    ("latency", "lower", 3.1, 3.0, False),
])
def test_intent_followed(key, prefer, value, neutral, followed):
    """`followed`: True, False, or None for an untestable intent."""
    assert intent_followed(key, prefer, value, neutral, margin=0.05) is followed


def test_adherence_pairs_instructed_with_neutral_and_skips_unoffered_tools():
    avoid = [{"key": "accuracy", "prefer": "higher"}, {"key": "calls/web_search", "prefer": "lower"}]
    cheap = [{"key": "accuracy", "prefer": "higher"}, {"key": "cost", "prefer": "lower"}]
    other = [{"key": "calls/code_interpreter", "prefer": "higher"}]
    records = [
        record(key="p/t1", variant="instructed", intents=avoid, calls={"web_search": 0}, kind_="avoid_tool"),
        record(key="p/t1", variant="neutral", intents=avoid, calls={"web_search": 1}, kind_="avoid_tool"),
        record(key="p/t2", variant="instructed", intents=cheap, cost=0.02),
        record(key="p/t2", variant="neutral", intents=cheap, cost=0.01),
        record(key="p/t3", variant="instructed", intents=other),  # tool not offered: skipped
        record(key="p/t3", variant="neutral", intents=other),
    ]
    checks = adherence_checks(records)
    assert [(c["key"], c["intent"], c["followed"]) for c in checks] == [
        ("p/t1", "calls/web_search", True), ("p/t2", "cost", False)]
    summary = summarize(records)["m"]["b"]
    assert summary.adherence == 0.5 and summary.adherence_n == 2
    assert summary.adherence_by_kind == {"avoid_tool": 1.0, "cost": 0.0}


def test_a_tool_neither_run_called_gives_no_free_adherence_credit():
    # Before: "avoid web search" with no call in either run counted as followed, so a method that
    # never calls the tool scored 100% on avoidance without reading the instruction.
    avoid = [{"key": "calls/web_search", "prefer": "lower"}]
    cheap = [{"key": "cost", "prefer": "lower"}]
    records = [
        record(key="p/t1", variant="instructed", intents=avoid, calls={}, kind_="avoid_tool"),
        record(key="p/t1", variant="neutral", intents=avoid, calls={}, kind_="avoid_tool"),
        record(key="p/t2", variant="instructed", intents=avoid, calls={"web_search": 1}, kind_="avoid_tool"),
        record(key="p/t2", variant="neutral", intents=avoid, calls={}, kind_="avoid_tool"),
        record(key="p/t3", variant="instructed", intents=cheap, cost=0.005),
        record(key="p/t3", variant="neutral", intents=cheap, cost=0.01),
    ]
    checks = adherence_checks(records)
    assert [(c["key"], c["followed"], c["testable"]) for c in checks] == [
        ("p/t1", None, False), ("p/t2", False, True), ("p/t3", True, True)]
    summary = summarize(records)["m"]["b"]
    assert summary.adherence == 0.5 and summary.adherence_n == 2 and summary.adherence_untestable == 1
    assert summary.adherence_by_kind == {"avoid_tool": 0.0, "cost": 1.0}
    only_untestable = summarize(records[:2])["m"]["b"]
    assert only_untestable.adherence is None and only_untestable.adherence_untestable == 1


def test_summary_pools_benchmarks_and_ignores_neutral_runs():
    records = [
        record(bench="qa", key="qa/a", correct=True, cost=0.01, latency=1.0, calls={"answer": 1}),
        record(bench="qa", key="qa/b", correct=False, cost=0.03, latency=3.0, valid=False),
        record(bench="p", key="p/c", variant="instructed", correct=True, cost=0.02, latency=2.0, intents=[]),
        record(bench="p", key="p/c", variant="neutral", correct=False, cost=9.0, latency=9.0),
    ]
    out = summarize(records)["m"]
    assert out["qa"].n == 2 and out["qa"].accuracy == 0.5 and out["qa"].cost_mean == pytest.approx(0.02)
    assert out["qa"].format_valid_rate == 0.5 and out["qa"].calls_per_task == {"answer": 0.5}
    overall = out["overall"]
    assert overall.n == 3 and overall.accuracy == pytest.approx(2 / 3)
    assert overall.cost_total == pytest.approx(0.06) and overall.latency_mean == pytest.approx(2.0)


def test_cost_per_correct_task_divides_all_spending_by_the_tasks_solved():
    """A cheap method that solves little can cost more per solved task than a dear one."""
    cheap = [record(bench="qa", key=f"qa/{i}", correct=i == 0, cost=0.01, latency=1.0) for i in range(10)]
    dear = [record(bench="qa", key=f"qa/{i}", correct=i < 5, cost=0.03, latency=1.0) for i in range(10)]
    none = [record(bench="qa", key="qa/0", correct=False, cost=0.01, latency=1.0)]
    assert summarize(cheap)["m"]["overall"].cost_per_correct == pytest.approx(0.1)
    assert summarize(dear)["m"]["overall"].cost_per_correct == pytest.approx(0.06)
    assert summarize(none)["m"]["overall"].cost_per_correct is None


@pytest.mark.parametrize(("successes", "n", "low", "high"), [
    (0, 10, 0.0, 0.2775),      # not [0, 0]: no success in 10 still allows up to ~28%
    (10, 10, 0.7225, 1.0),
    (41, 100, 0.3187, 0.5080),
    (1, 2, 0.0945, 0.9055),
    (0, 0, 0.0, 1.0),          # nothing evaluated: nothing known
])
def test_wilson_interval_known_values(successes, n, low, high):
    got = wilson_interval(successes, n)
    assert got == (pytest.approx(low, abs=1e-4), pytest.approx(high, abs=1e-4))


def test_wilson_interval_rejects_impossible_counts():
    with pytest.raises(ValueError, match="successes <= n"):
        wilson_interval(3, 2)
    assert proportion_interval(0.5, 20) == wilson_interval(10, 20) and proportion_interval(None, 5) == (0.0, 1.0)


def test_metrics_carry_accuracy_and_adherence_intervals():
    records = [record(key=f"b/t{i}", correct=False) for i in range(10)]
    m = summarize(records)["m"]["overall"]
    assert m.accuracy == 0.0 and m.accuracy_ci_low == 0.0 and m.accuracy_ci_high == pytest.approx(0.2775, abs=1e-4)
    assert m.adherence is None and m.adherence_ci_low is None and m.adherence_ci_high is None
    cheap = [{"key": "cost", "prefer": "lower"}]
    pref = [record(key="p/t1", variant="instructed", intents=cheap, cost=0.005),
            record(key="p/t1", variant="neutral", intents=cheap, cost=0.01)]
    p = summarize(pref)["m"]["overall"]
    assert p.adherence == 1.0 and (p.adherence_ci_low, p.adherence_ci_high) == (pytest.approx(0.2065, abs=1e-4), 1.0)
    assert p.accuracy_ci_low == pytest.approx(0.2065, abs=1e-4)  # 1 of 1 scored (the neutral run is not)
    dumped = p.model_dump()
    assert {"accuracy_ci_low", "accuracy_ci_high", "adherence_ci_low", "adherence_ci_high"} <= set(dumped)


def turn(tool, *aliases):
    return {"tool": tool, "tool_usage": {a: {"prompt_tokens": 10, "completion_tokens": 2} for a in aliases}}


def test_call_shares_per_tool_and_per_expert_model():
    collapsed = [record(method="c", key=f"b/t{i}", calls={"answer": 2},
                        trajectory={"turns": [turn("answer", "big"), turn("answer", "big")]}) for i in range(3)]
    mixed = [
        record(method="x", key="b/t0", calls={"answer": 1, "web_search": 1},
               trajectory={"turns": [turn("web_search"), turn("answer", "small")]}),
        record(method="x", key="b/t1", calls={"answer": 2},
               trajectory={"turns": [turn("answer", "big"), turn("answer", "small")]}),
        record(method="x", key="b/t2", calls={}),  # answered without a call
        record(method="x", key="b/t2", variant="neutral", calls={"web_search": 5},  # not scored
               trajectory={"turns": [turn("web_search", "big")] * 5}),
    ]
    out = summarize(collapsed + mixed)
    c = out["c"]["overall"]
    assert c.tool_share == {"answer": 1.0} and c.model_share == {"big": 1.0}
    assert c.calls_total == 6 and c.model_calls_total == 6
    x = out["x"]["overall"]
    assert x.calls_total == 4 and x.tool_share == {"answer": 0.75, "web_search": 0.25}
    assert x.model_calls_total == 3 and x.model_share == pytest.approx({"small": 2 / 3, "big": 1 / 3})
    assert list(x.model_share) == ["small", "big"]  # largest share first
    empty = summarize([record(method="e", calls={})])["e"]["overall"]
    assert empty.tool_share == {} and empty.model_share == {} and empty.calls_total == 0


def test_model_intents_count_the_calls_each_model_served():
    from toolorchestra.evaluation.metrics import intent_value

    turns = [{"tool": "ask_vote", "tool_usage": {"smollm2-vote5": {"prompt_tokens": 5, "completion_tokens": 5}}},
             {"tool": "ask_direct", "tool_usage": {"smollm2": {"prompt_tokens": 1, "completion_tokens": 1}}},
             {"tool": "ask_vote", "tool_usage": {"smollm2-vote5": {"prompt_tokens": 5, "completion_tokens": 5}}},
             {"tool": "code_interpreter", "tool_usage": {}}]
    instructed = record(variant="instructed", intents=[{"key": "models/smollm2-vote5", "prefer": "lower"}])
    instructed.trajectory = {"turns": turns[1:2]}
    neutral = record(variant="neutral")
    neutral.trajectory = {"turns": turns}
    assert intent_value(neutral, "models/smollm2-vote5") == 2 and intent_value(neutral, "models/smollm2") == 1
    assert intent_value(neutral, "models/gpt-5") == 0
    (row,) = adherence_checks([instructed, neutral])
    assert (row["instructed"], row["neutral"], row["followed"]) == (0, 2, True)
