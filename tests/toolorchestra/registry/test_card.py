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
                        "adherence": adherence, "adherence_n": 8 if adherence is not None else 0}}


REPORT = {
    "fingerprint": "f00", "benchmarks": [{"name": "qa", "kind": "qa", "tasks": 20, "notes": ["2 tasks skipped"]}],
    "labels": {"expert:big": ["strongest", "cheapest"]}, "judge": {"model": None}, "train_set_known": True,
    "summary": {"trained": metrics(0.55, 0.002, 0.75), "champion": metrics(0.5, 0.004),
                "expert:big": metrics(0.6, 0.01), "prompted": metrics(0.1, 0.001), "random_router": metrics(0.05, 0.01)},
}
BASELINES = {name: Scores(accuracy=REPORT["summary"][name]["overall"]["accuracy"], cost_mean=0.0, n=20)
             for name in ("prompted", "random_router")}


def test_card_has_every_section():
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), Scores(accuracy=0.5, cost_mean=0.004, n=20),
                      GateConfig(accuracy_tolerance=0.01), baselines=BASELINES, name="trained")
    card = model_card(name="orchestrator", version="3", run_id="r1", manifest={
        "base_model": "smollm2-135m-instruct", "backend": "trl", "steps": {"sft": 4, "grpo": 3},
        "policy_alias": "smollm2", "weights_sha256": "beef"}, decision=decision,
        gate=GateConfig(accuracy_tolerance=0.01), report=REPORT,
        candidate="trained", champion={"method": "champion", "version": "2"}, lock=LOCK, extra_limits=["custom limit"])
    assert "Gate decision: **promoted to champion**" in card and "passed: accuracy 0.550 vs champion 0.500" in card
    assert "| train | `models/orchestrator` | `def.dir` |" in card
    assert "| validate | `data/validated` | `abc.dir` |" in card
    assert '"train.grpo.steps": 3' in card and "accuracy_tolerance=0.01" in card
    assert "| trained **candidate** | 55.0% [34.2, 74.2] | $0.002 | 1.50s | 75.0% [40.9, 92.9] |" in card
    assert "| expert:big (strongest, cheapest) | 60.0% [38.7, 78.1] |" in card
    assert "Champion: version 2" in card and "+5.0 pts" in card and "x0.50" in card
    assert "orchestra lineage models:/orchestrator/3" in card
    assert "no LLM judge configured" in card and "qa: 2 tasks skipped" in card and "custom limit" in card
    assert "accuracy 55.0% [34.2, 74.2] (95% Wilson interval)" in card  # 11 of 20
    # the baseline checks, with their figures and intervals, in the reasons and their own table
    assert "- passed: trained 55.0% [34.2, 74.2] beats prompted 10.0% [2.8, 30.1] (rule interval" in card
    assert "| random_router | 5.0% [0.9, 23.6] | +50.0 pts | passed |" in card
    assert "| accuracy | 55.0% [34.2, 74.2] | 50.0% [29.9, 70.1] | +5.0 pts |" in card


def test_first_promotion_card_and_missing_lock():
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), None, GateConfig(), baselines=BASELINES)
    card = model_card(name="orchestrator", version=None, run_id=None, manifest={}, decision=decision, gate=GateConfig(),
                      report=REPORT, candidate="trained", champion=None, lock={})
    assert "first promotion: there is no champion yet" in card and "No previous champion" in card
    assert "Gate decision: **promoted to champion**" in card
    assert "No dvc.lock" in card and "(candidate, not registered)" in card
    assert data_versions(LOCK)[0] == {"stage": "train", "path": "models/orchestrator", "md5": "def.dir", "files": 9}


def test_refused_first_promotion_card_says_why_plainly():
    report = {**REPORT, "summary": {**REPORT["summary"], "trained": metrics(0.0, 0.0)}}
    report["summary"].pop("random_router")
    decision = decide(Scores(accuracy=0.0, cost_mean=0.0, n=20), None, GateConfig(),
                      baselines={"prompted": BASELINES["prompted"]}, name="trained")
    card = model_card(name="orchestrator", version="4", run_id="r", manifest={}, decision=decision, gate=GateConfig(),
                      report=report, candidate="trained", champion=None, lock={})
    assert "Gate decision: **kept as challenger (not promoted)**" in card
    assert "\nnot promoted: trained solved no task: 0.0% [0.0, 16.1] on 20 tasks; trained 0.0% [0.0, 16.1] does " \
           "not beat prompted 10.0% [2.8, 30.1]" in card
    assert "- failed: baseline random_router is not in the evaluation" in card
    assert "| random_router | not evaluated | - | **failed** |" in card
    assert "| prompted | 10.0% [2.8, 30.1] | -10.0 pts | **failed** |" in card


def test_card_reads_intervals_from_the_report_when_present():
    report = {**REPORT, "summary": {**REPORT["summary"]}}
    report["summary"]["trained"] = {"overall": {**metrics(0.55, 0.002)["overall"], "accuracy_ci_low": 0.5,
                                                "accuracy_ci_high": 0.6}}
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), None, GateConfig(), baselines=BASELINES)
    card = model_card(name="o", version=None, run_id=None, manifest={}, decision=decision, gate=GateConfig(),
                      report=report, candidate="trained", champion=None, lock={})
    assert "| trained **candidate** | 55.0% [50.0, 60.0] |" in card


def test_card_pairs_the_candidate_with_its_warm_start_and_the_champion():
    # Before, the card showed each method's accuracy only: whether GRPO moved anything against its
    # own warm start (the SFT-only checkpoint) was not on it.
    paired = {"sft_only": {"first_only": 6, "second_only": 4, "both": 60, "neither": 47, "p_value": 0.7539},
              "champion": {"first_only": 9, "second_only": 1, "both": 50, "neither": 57, "p_value": 0.0216},
              "prompted": {"first_only": 70, "second_only": 0, "both": 0, "neither": 47, "p_value": 1e-21}}
    report = {**REPORT, "summary": {**REPORT["summary"], "sft_only": metrics(0.5, 0.002)}, "paired": paired,
              "paired_with": "trained"}
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), None, GateConfig(), baselines=BASELINES)
    card = model_card(name="orchestrator", version="3", run_id="r1", manifest={}, decision=decision, gate=GateConfig(),
                      report=report, candidate="trained", champion={"method": "champion", "version": "2"}, lock={})
    assert "## Paired on the same episodes" in card
    assert "| sft_only | 6 | 4 | 0.75 |" in card and "| champion | 9 | 1 | 0.022 |" in card
    assert "| prompted | 70 |" not in card  # the baselines have their own section
    older = model_card(name="orchestrator", version="3", run_id="r1", manifest={}, decision=decision,
                       gate=GateConfig(), report=REPORT, candidate="trained", champion=None, lock={})
    assert "## Paired" not in older  # a report written before the pairing: no section, no error
    other = model_card(name="orchestrator", version="3", run_id="r1", manifest={}, decision=decision,
                       gate=GateConfig(), report=report, candidate="expert:big", champion=None, lock={})
    assert "## Paired" not in other  # the report paired another candidate: its counts are not this one's


def test_card_states_the_checkpoint_choice():
    decision = decide(Scores(accuracy=0.55, cost_mean=0.002, n=20), None, GateConfig(), baselines=BASELINES)
    selection = {"chosen": "warm_start", "n": 30, "warm_start_solved": 20, "grpo_solved": 17, "grpo_only": 1,
                 "warm_start_only": 4, "reason": "GRPO's policy solved 17/30 validation tasks, fewer than the warm "
                 "start's 20/30 by more than max_drop 0: the warm start is exported", "seconds": 60.0}
    card = model_card(name="orchestrator", version="1", run_id="r", manifest={"selection": selection,
                      "steps": {"sft": 40, "grpo": 0, "grpo_run": 1}}, decision=decision, gate=GateConfig(),
                      report=REPORT, candidate="trained", champion=None, lock={})
    assert ("- checkpoint choice (validation split, 30 tasks): the SFT warm start's policy: GRPO's policy solved "
            "17/30") in card
    card = model_card(name="orchestrator", version="1", run_id="r", manifest={}, decision=decision, gate=GateConfig(),
                      report=REPORT, candidate="trained", champion=None, lock={})
    assert "checkpoint choice" not in card
