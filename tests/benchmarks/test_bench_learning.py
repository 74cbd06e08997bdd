"""`benchmarks/bench_learning.py --quick` end to end with the tiny random-weight model as the
orchestrator and every expert: training (SFT, GRPO, a second seed), every arm on one task list, and
every figure in the JSON, the report, the plots and MLflow."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from helpers.eval_fixtures import save_tiny_model

REPO = Path(__file__).resolve().parents[2]


def _bench():
    if "bench_learning" in sys.modules:
        return sys.modules["bench_learning"]
    spec = importlib.util.spec_from_file_location("bench_learning", REPO / "benchmarks" / "bench_learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_learning"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_folder(tiny_llm, tmp_path_factory) -> Path:
    return save_tiny_model(tiny_llm, tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow
def test_quick_run_evaluates_every_arm_on_one_task_list_with_every_figure(tiny_folder, tmp_path, capsys):
    bench = _bench()
    out = tmp_path / "out"
    bench.main(["--quick", "--json", "--out", str(out), "--model", str(tiny_folder),
                "--expert-model", str(tiny_folder)])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    assert set(doc["arms"]) == set(bench.ARMS)
    assert doc["identical_tasks"] is True
    assert {arm["task_list_sha"] for arm in doc["arms"].values()} == {doc["task_list_sha"]}
    assert {arm["tasks"] for arm in doc["arms"].values()} == {doc["tasks"]}
    assert set(doc["benchmarks"]) == {"tool_use_in_domain", "tool_use_unseen", "qa_in_domain", "qa_unseen",
                                      "preferences"}
    assert doc["domains"] == {"train": ["library", "clinic", "telecom"], "unseen": ["movie", "restaurant"]}
    for name, arm in doc["arms"].items():
        for key in ("accuracy", "ci_low", "ci_high", "cost_mean", "latency_mean", "format_valid_rate",
                    "tool_share", "model_share", "adherence", "adherence_by_kind"):
            assert key in arm, (name, key)
        assert 0.0 <= arm["ci_low"] <= arm["accuracy"] <= arm["ci_high"] <= 1.0
        for group in ("in_domain", "unseen_domains"):
            assert set(bench.FIGURES) <= set(arm[group]), (name, group)
            assert arm[group]["n"] > 0
        assert len(arm["accuracy_at_budget"]) == len(doc["budgets"])
        assert arm["accuracy_at_budget"] == sorted(arm["accuracy_at_budget"])  # more budget never hurts
        assert set(doc["summary"][name]) >= {"accuracy", "ci_low", "ci_high", "cost_mean", "latency_mean",
                                             "unseen_domains"}
    for name in ("sft_grpo", "sft_grpo_seed1"):
        steps = doc["arms"][name]["grpo_steps"]
        assert steps and {"reward_mean", "reward_std", "frac_reward_zero_std", "groups_filtered"} <= set(steps[0])
    router = doc["arms"]["embedding_router"]["router"]
    assert set(router["labels"]) <= {"orchestrator", "program", "answer"} and router["route_shares"]

    for name in ("results.json", "report.md", "cost_accuracy.png", "accuracy_budget.png"):
        assert (out / name).is_file(), name
    assert json.loads((out / "results.json").read_text())["arms"].keys() == doc["arms"].keys()
    assert "| sft_grpo |" in (out / "report.md").read_text()
    assert not (out / "work").exists()  # checkpoints removed unless --keep-checkpoints

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    children = client.search_runs([client.get_run(doc["mlflow_run_id"]).info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{doc['mlflow_run_id']}'")
    assert sorted(r.data.tags["arm"] for r in children) == sorted(bench.ARMS)
    assert all("unseen_domains/accuracy" in r.data.metrics for r in children)


def test_a_task_folder_without_tasks_is_a_clear_error(tmp_path):
    from toolorchestra.core.errors import ConfigError

    bench = _bench()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no tool-use tasks"):
        bench.check_tasks(tmp_path / "empty", ["library"], ["movie"])


def test_budget_grid_and_accuracy_within_budget():
    from toolorchestra.evaluation.metrics import TaskRecord

    bench = _bench()

    def record(cost: float, correct: bool) -> TaskRecord:
        return TaskRecord(method="m", benchmark="b", task_id="t", key="k", kind="qa", correct=correct,
                          answered=True, format_valid=True, cost_usd=cost, latency_s=0.1, turns=1)

    records = [record(1e-5, True), record(1e-3, True), record(1e-4, False)]
    grid = bench.budgets(records, 3)
    assert grid == pytest.approx([1e-5, 1e-4, 1e-3])
    assert [bench.accuracy_at(records, b) for b in grid] == pytest.approx([1 / 3, 1 / 3, 2 / 3])
