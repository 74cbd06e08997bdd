"""The Pareto front and its plot's labels, and the docstring examples of the evaluation and registry modules."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from toolorchestra.evaluation.metrics import Metrics
from toolorchestra.evaluation.report import pareto_figure, pareto_front, place_labels


def test_pareto_front_keeps_only_undominated_methods():
    points = {"cheap": (0.001, 0.2), "dominated": (0.01, 0.2), "mid": (0.01, 0.5), "best": (0.1, 0.9),
              "pricey": (1.0, 0.9)}
    assert pareto_front(points) == ["cheap", "mid", "best"]
    assert pareto_front({}) == []
    assert pareto_front({"tie-a": (0.0, 0.5), "tie-b": (0.0, 0.5)}) == ["tie-a"]


# Ten methods as a demo evaluation places them: four at (0 cost, 0 accuracy), others a hair apart.
POINTS = {"trained": (0.0, 0.0), "champion": (0.0, 0.0), "prompted": (0.0, 0.0), "random_router": (0.0, 0.0),
          "expert:qwen-0.5b": (0.0001, 0.0), "expert:smollm2": (0.002, 0.0), "expert:phi": (0.002, 0.02),
          "expert:llama-1b": (0.01, 0.5), "expert:llama-3b": (0.0102, 0.51), "expert:big": (0.03, 0.9)}
ROLES = {"trained": "candidate", "champion": "champion", "prompted": "orchestrator", "random_router": "random"}


def eval_run(points):
    def metrics(cost, acc):
        return Metrics(n=50, accuracy=acc, cost_mean=cost, cost_total=50 * cost, latency_mean=1.0,
                       format_valid_rate=1.0, answered_rate=1.0)

    return SimpleNamespace(
        benchmarks=[SimpleNamespace(name="qa"), SimpleNamespace(name="toolscale")],
        methods=[SimpleNamespace(name=n, role=ROLES.get(n, "expert")) for n in points],
        summary={n: {b: metrics(*p) for b in ("overall", "qa", "toolscale")} for n, p in points.items()})


def label_boxes(fig, ax):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in ax.texts]


def test_pareto_labels_never_overlap_and_name_every_method_once():
    import matplotlib.pyplot as plt

    fig = pareto_figure(eval_run(POINTS))
    try:
        for ax in fig.axes[:3]:
            boxes = label_boxes(fig, ax)
            named = sorted(n.strip() for text, _ in boxes for n in text.replace("\n", " ").split(","))
            assert named == sorted(POINTS)
            for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2):
                assert not box_a.overlaps(box_b), f"labels {a!r} and {b!r} overlap"
            # the four methods at the same point share one label
            assert any(all(n in text for n in ("trained", "champion", "prompted", "random_router"))
                       for text, _ in boxes)
    finally:
        plt.close(fig)


def test_place_labels_separates_many_nearby_points():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    points = {f"method-{i}": (i * 0.04, 0.5 + 0.002 * i) for i in range(12)}  # a row of close points
    for x, y in points.values():
        ax.scatter(x, y)
    ax.set_xlim(-0.1, 0.6)
    ax.set_ylim(0, 1)
    try:
        labels = place_labels(ax, points)
        assert len(labels) >= 2
        boxes = label_boxes(fig, ax)
        assert all(not a.overlaps(b) for (_, a), (_, b) in itertools.combinations(boxes, 2))
        assert place_labels(ax, {}) == []
    finally:
        plt.close(fig)


@pytest.mark.parametrize("module", ["toolorchestra.evaluation.judges", "toolorchestra.evaluation.metrics",
                                    "toolorchestra.evaluation.report", "toolorchestra.registry.gate",
                                    "toolorchestra.registry.store"])
def test_docstring_examples_hold(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_category_table_counts_solved_episodes_and_first_calls_per_category():
    from toolorchestra.evaluation.metrics import TaskRecord
    from toolorchestra.evaluation.report import category_table

    def record(method, category, correct, first, variant="plain"):
        turns = [{"index": 0, "tool": first}] if first != "(answer)" else [{"index": 0, "text": "42"}]
        return TaskRecord(method=method, benchmark="qa", task_id=f"{category}-{first}", key="k",
                          kind="tool_use" if category == "tool_use" else "qa", category=category, variant=variant,
                          correct=correct, answered=True, format_valid=True, cost_usd=0.0, latency_s=0.0, turns=1,
                          trajectory={"turns": turns})

    records = [record("a", "count", True, "code_interpreter"), record("a", "count", False, "local_search"),
               record("a", "count", False, "local_search"), record("a", "tool_use", False, "get_loan_details"),
               record("a", "count", True, "code_interpreter", variant="neutral"),  # not scored: left out
               record("b", "count", False, "(answer)")]
    run = SimpleNamespace(methods=[SimpleNamespace(name="a"), SimpleNamespace(name="b"), SimpleNamespace(name="c")],
                          records=records)
    lines = category_table(run).splitlines()
    assert lines[0] == "| method | count | tool_use |"
    assert lines[2] == "| a | 1/3 (local_search 2, code_interpreter 1) | 0/1 (get_loan_details 1) |"
    assert lines[3] == "| b | 0/1 ((answer) 1) | - |"
    assert len(lines) == 4  # a method without scored episodes has no row
    assert "3 more" in category_table(SimpleNamespace(methods=[SimpleNamespace(name="a")], records=[
        record("a", "count", False, tool) for tool in "pqrstu"]), top=3)
    # items with gold answers get the floor of one answer for all: 2 of 3 counts are 1
    graded = [r.model_copy(update={"judgement": {"details": {"gold": gold}}})
              for r, gold in zip(records[:3], ["1", "4", "1"], strict=True)]
    lines = category_table(SimpleNamespace(methods=[SimpleNamespace(name="a")], records=graded + records[3:4])).splitlines()
    assert lines[-1] == "| one answer for all | 2/3 ('1') | - |"


def test_the_report_pairs_the_candidate_with_each_method_on_the_same_episodes():
    # Before, the report gave each method's accuracy and interval only; what GRPO moved against its
    # warm start (right only after it, only before) was counted by hand from per_task.jsonl.
    from toolorchestra.evaluation.metrics import TaskRecord
    from toolorchestra.evaluation.report import headline_metrics, paired, paired_table

    def record(method, key, correct, variant="plain"):
        return TaskRecord(method=method, benchmark="qa", task_id=key, key=key, kind="qa", variant=variant,
                          correct=correct, answered=True, format_valid=True, cost_usd=0.0, latency_s=0.0, turns=1)

    trained = [True] * 10 + [False] * 2 + [True] * 3 + [False] * 5
    warm = [False] * 10 + [True] * 2 + [True] * 3 + [False] * 5
    records = ([record("trained", str(i), c) for i, c in enumerate(trained)]
               + [record("sft_only", str(i), c) for i, c in enumerate(warm)]
               + [record("sft_only", "extra", True)]  # an episode the candidate did not run: not paired
               + [record("trained", "0", False, variant="neutral"), record("sft_only", "0", True, variant="neutral")])
    run = SimpleNamespace(methods=[SimpleNamespace(name="trained"), SimpleNamespace(name="sft_only"),
                                   SimpleNamespace(name="prompted")],
                          records=records, summary={"trained": {}, "sft_only": {}}, seconds={})
    result = paired(run)["sft_only"]
    assert (result.first_only, result.second_only, result.both, result.neither) == (10, 2, 3, 5)
    assert result.p_value == pytest.approx(0.0386, abs=1e-4)  # 2 * P(X <= 2), X ~ Bin(12, 1/2)
    assert "prompted" not in paired(run)  # no shared episodes
    assert paired_table(paired(run)).splitlines()[2] == "| sft_only | 10 | 2 | 3 | 5 | 0.039 |"
    assert paired(SimpleNamespace(methods=run.methods, records=records, summary={})) == {}  # no candidate
    run.summary["trained"]["overall"] = Metrics(n=20, accuracy=0.65, cost_mean=0.0, cost_total=0.0, latency_mean=1.0,
                                                format_valid_rate=1.0, answered_rate=1.0)
    headline = headline_metrics(run)
    assert headline["eval/paired/sft_only/candidate_only"] == 10 and headline["eval/paired/sft_only/method_only"] == 2
