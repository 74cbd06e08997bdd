"""The model card: decision and reasons, data versions from dvc.lock, metrics vs baselines and champion."""

from __future__ import annotations

from toolorchestra.registry.card import data_versions, model_card
from toolorchestra.registry.gate import GateConfig, Scores, decide

LOCK = {"schema": "2.0", "stages": {
    "validate": {"cmd": "orchestra stage validate",
                 "outs": [{"path": "data/validated", "md5": "abc.dir", "nfiles": 7}]},
    "train": {"cmd": "orchestra stage train", "params": {"params.yaml": {"train.grpo.steps": 3, "base.seed": 0}},
              "outs": [{"path": "models/orchestrator", "md5": "def.dir", "nfiles": 9}]},
}}


def metrics(acc, cost, adherence=None):
    return {"overall": {"n": 20, "accuracy": acc, "cost_mean": cost, "latency_mean": 1.5, "format_valid_rate": 1.0,
                        "adherence": adherence}}


REPORT = {
    "fingerprint": "f00", "benchmarks": [{"name": "qa", "kind": "qa", "tasks": 20, "notes": ["2 tasks skipped"]}],
    "labels": {"expert:big": ["strongest", "cheapest"]}, "judge": {"model": None}, "train_set_known": True,
    "summary": {"trained": metrics(0.55, 0.002, 0.75), "champion": metrics(0.5, 0.004),
                "expert:big": metrics(0.6, 0.01)},
}


def test_card_has_every_section():
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), Scores(accuracy=0.5, cost_mean=0.004, n=20),
                      GateConfig(accuracy_tolerance=0.01))
    card = model_card(name="orchestrator", version="3", run_id="r1", manifest={
        "base_model": "smollm2-135m-instruct", "backend": "trl", "steps": {"sft": 4, "grpo": 3},
        "policy_alias": "smollm2", "weights_sha256": "beef"}, decision=decision,
        gate=GateConfig(accuracy_tolerance=0.01), report=REPORT,
        candidate="trained", champion={"method": "champion", "version": "2"}, lock=LOCK, extra_limits=["custom limit"])
    assert "Gate decision: **promoted to champion**" in card and "passed: accuracy 0.550 vs champion 0.500" in card
    assert "| train | `models/orchestrator` | `def.dir` |" in card
    assert "| validate | `data/validated` | `abc.dir` |" in card
    assert '"train.grpo.steps": 3' in card and "accuracy_tolerance=0.01" in card
    assert "| trained **candidate** | 55.0% | $0.002 | 1.50s | 75.0% |" in card
    assert "| expert:big (strongest, cheapest) | 60.0% |" in card
    assert "Champion: version 2" in card and "+5.0 pts" in card and "x0.50" in card
    assert "orchestra lineage models:/orchestrator/3" in card
    assert "no LLM judge configured" in card and "qa: 2 tasks skipped" in card and "custom limit" in card
    assert "+/-22 points" in card  # 95% interval at n=20, p=0.55


def test_first_promotion_card_and_missing_lock():
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), None, GateConfig())
    card = model_card(name="orchestrator", version=None, run_id=None, manifest={}, decision=decision, gate=GateConfig(),
                      report=REPORT, candidate="trained", champion=None, lock={})
    assert "first promotion: there is no champion yet" in card and "No previous champion" in card
    assert "No dvc.lock" in card and "(candidate, not registered)" in card
    assert data_versions(LOCK)[0] == {"stage": "train", "path": "models/orchestrator", "md5": "def.dir", "files": 9}
