"""Stage `validate`: filters, suite, kept outputs; a failing suite fails the stage. The acceptance
run: every vendored ToolScale database and tau2-mock -> tools, >= 50 tasks, 100% replay, suite passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.third_party import THIRD_PARTY, TOOLSCALE, domain_folder

from stagekit.runner import run_stage
from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.settings import Settings


def write_params(root: Path, synthesize: dict, validate: dict) -> None:
    params = {
        "base": {"seed": 1},
        "synthesize": {"outs": {"toolscale": "data/toolscale", "qa": "data/qa"}, **synthesize},
        "validate": {"deps": {"toolscale": "data/toolscale", "qa": "data/qa"},
                     "outs": {"validated": "data/validated", "report": "reports/validation"}, **validate},
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params))


def run(root: Path, stage: str) -> dict[str, float]:
    return run_stage(stage, params_file=root / "params.yaml", settings=Settings(workspace=root, read_only_roots=(THIRD_PARTY,)), track=False)


def test_validate_keeps_good_tasks_and_drops_bad(tmp_path):
    write_params(tmp_path, {"domains": ["telecom", "clinic"], "db_size": 15, "tasks_per_domain": 12, "qa_per_domain": 8},
                 {"min_tasks_per_domain": 10, "min_qa": 10})
    run(tmp_path, "synthesize")
    tasks_file = tmp_path / "data/toolscale/telecom/tasks.json"
    tasks = json.loads(tasks_file.read_text())
    tasks.append({**tasks[0], "id": "copy"})  # a duplicate
    broken = json.loads(json.dumps(tasks[1]))
    broken["id"] = "broken"
    broken["evaluation_criteria"]["actions"][-1]["arguments"] = {}
    tasks.append(broken)
    tasks_file.write_text(json.dumps(tasks))
    metrics = run(tmp_path, "validate")
    assert metrics["tasks_input"] == 26 and metrics["tasks_kept"] == 24
    assert metrics["tasks_dropped_duplicate"] == 1 and metrics["tasks_dropped_replay_error"] == 1
    assert metrics["qa_kept"] == 16 and metrics["suite_expectations"] == 17
    kept = json.loads((tmp_path / "data/validated/toolscale/telecom/tasks.json").read_text())
    assert len(kept) == 12 and {"copy", "broken"}.isdisjoint(t["id"] for t in kept)
    report = tmp_path / "reports/validation"
    assert (report / "data_docs/index.html").exists()
    stats = json.loads((report / "filter_stats.json").read_text())
    assert stats["counts"]["telecom"]["dropped_duplicate"] == 1
    assert (tmp_path / "data/validated/qa/clinic.jsonl").exists()


def test_failing_suite_fails_the_stage_listing_expectations(tmp_path):
    write_params(tmp_path, {"domains": ["library"], "db_size": 15, "tasks_per_domain": 10, "qa_per_domain": 5},
                 {"max_actions": 2, "min_tasks_per_domain": 50})
    run(tmp_path, "synthesize")
    with pytest.raises(OrchestraError, match=r"(?s)validation suite failed:.*column=domain_tasks.*column=n_actions"):
        run(tmp_path, "validate")
    assert not (tmp_path / "data/validated").exists()  # nothing moved into place


def test_acceptance_all_vendored_domains(tmp_path):
    deps = {f"domain_{name}": str(domain_folder(name)) for name in TOOLSCALE}
    deps["domain_tau2_mock"] = str(domain_folder("tau2-mock"))
    write_params(tmp_path, {"domains": [], "deps": deps, "tasks_per_domain": 50, "qa_per_domain": 20},
                 {"min_tasks_per_domain": 50, "min_qa": 100})
    synth = run(tmp_path, "synthesize")
    assert synth["domains"] == 8 and synth["domains_short_of_tasks"] == 0
    assert all(synth[f"tasks_{name}"] == 50 for name in [*TOOLSCALE, "tau2_mock"])
    metrics = run(tmp_path, "validate")
    assert metrics["tasks_input"] == 400 and metrics["tasks_kept"] == 400  # 100% golden replay, no drops
    for name in TOOLSCALE:
        tools = json.loads((tmp_path / f"data/validated/toolscale/{name}/tools.json").read_text())
        assert len(tools) >= 10
