"""The retrain flow end to end on a temporary git + DVC workspace (real Prefect, DVC, MLflow)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
import yaml

from stagekit.graph import StageFailed
from stagekit.status import read_status
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings

pytestmark = pytest.mark.usefixtures("prefect_harness")


def runs_of(workspace):
    import mlflow

    mlflow.set_tracking_uri(Settings(workspace=workspace).tracking_uri)
    exp = mlflow.get_experiment_by_name("toolorchestra")
    return mlflow.search_runs([exp.experiment_id], output_format="list")


def dvc_status(workspace):
    from dvc.repo import Repo

    with Repo(str(workspace)) as repo:
        return repo.status()


def test_full_run_noop_rerun_forced_stage_and_lineage(workspace, monkeypatch):
    from flows.retrain import retrain
    from stagekit.graph import stage_order
    from stagekit.lineage import lineage

    first = retrain(workspace=str(workspace))
    assert [o.stage for o in first] == stage_order(workspace) and all(o.ran for o in first)
    validate = next(o for o in first if o.stage == "validate")
    assert validate.metrics["tasks_kept"] > 0
    assert dvc_status(workspace) == {}
    remote = workspace / ".orchestra" / "dvc-remote"
    assert sum(1 for p in remote.rglob("*") if p.is_file()) > 5  # dvc push stored the outputs

    runs = runs_of(workspace)
    parent = next(r for r in runs if r.data.tags.get("orchestra.flow") == "retrain")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.data.tags["orchestra.stage"] for r in children) == sorted(stage_order(workspace))
    assert all(r.data.tags["prefect.flow_run_id"] == parent.data.tags["prefect.flow_run_id"] for r in children)
    assert parent.data.metrics["validate.tasks_kept"] == validate.metrics["tasks_kept"]

    # lineage: from a stage run back to the data hashes dvc.lock records
    info = lineage(children[0].info.run_id, Settings(workspace=workspace))
    lock = yaml.safe_load((workspace / "dvc.lock").read_text())["stages"]
    for stage in info["stages"]:
        assert {o["path"]: o["md5"] for o in stage["outs"]} == {o["path"]: o["md5"] for o in lock[stage["stage"]]["outs"]}
    from stagekit.tracking import git_commit

    assert info["flow_run"]["git_commit"] == git_commit(workspace)[0]
    assert "dvc pull" in info["fetch"]

    # evaluate + promote: the report in MLflow and Prefect, a registered version with its aliases
    import mlflow

    evaluate_run = next(r for r in children if r.data.tags["orchestra.stage"] == "evaluate")
    client = mlflow.MlflowClient()
    logged = {a.path for a in client.list_artifacts(evaluate_run.info.run_id, "eval")}
    assert {"eval/pareto.png", "eval/report.md", "eval/per_task.jsonl"} <= logged
    assert "evaluation/table.json" in {a.path for a in client.list_artifacts(evaluate_run.info.run_id, "evaluation")}
    challenger = client.get_model_version_by_alias("orchestrator", "challenger")
    decision = json.loads((workspace / "reports/promote/decision.json").read_text())
    assert decision["version"] == str(challenger.version)
    assert challenger.tags["orchestra.gate.decision"] == decision["decision"]
    if decision["decision"] == "promoted":
        assert client.get_model_version_by_alias("orchestrator", "champion").version == challenger.version
    else:  # the toy model solves (next to) nothing: refused, said plainly, it stays challenger; the flow succeeded
        assert decision["decision"] == "rejected" and decision["summary"].startswith("not promoted: ")
        from mlflow.exceptions import MlflowException

        with pytest.raises(MlflowException):
            client.get_model_version_by_alias("orchestrator", "champion")
    card = (workspace / "reports/promote/model_card.md").read_text()
    head, cut, _ = challenger.description.partition("\n\n... (cut; the full card is the run artifact model_card.md)")
    assert (challenger.description == card) if not cut else (card.startswith(head) and len(card) > len(head))
    model_lineage = lineage("models:/orchestrator@challenger", Settings(workspace=workspace))
    assert model_lineage["flow_run"]["run_id"] == parent.info.run_id
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as prefect:
        keys = {a.key for a in prefect.read_artifacts(artifact_filter=ArtifactFilter(
            key=ArtifactFilterKey(any_=["evaluation-report", "promotion-decision"])))}
    assert keys == {"evaluation-report", "promotion-decision"}

    # the same through the CLI an auditor / stakeholder uses
    from typer.testing import CliRunner

    from orchestra_cli.main import app

    monkeypatch.chdir(workspace)
    result = CliRunner().invoke(app, ["lineage", parent.info.run_id, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["flow_run"]["run_id"] == parent.info.run_id
    result = CliRunner().invoke(app, ["runs", "--json", "--metric", "validate.tasks_kept"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert listed[0]["run_id"] == parent.info.run_id
    assert listed[0]["metrics"] == {"validate.tasks_kept": validate.metrics["tasks_kept"]}

    # The checkpoint choice's benchmark reads this workspace (params, validation split, both
    # checkpoints). Its own process: in this one its console would bind to pytest's capture.
    from helpers.workspaces import REPO

    bench = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_select.py"), "--json"],
                           cwd=workspace, capture_output=True, text=True, timeout=600)
    assert bench.returncode == 0, bench.stderr[-3000:]
    doc = json.loads(bench.stdout.strip().splitlines()[-1])
    assert doc["items"] == 2 and set(doc["solved"]) == {"models/warm_start", "models/orchestrator"}
    assert doc["seconds_old"] > 0 and doc["seconds_new"] > 0 and isinstance(doc["outcome_differences"], list)

    second = retrain(workspace=str(workspace))
    assert not any(o.ran for o in second)
    forced = retrain(workspace=str(workspace), force=["validate"], until=["validate"])
    assert [(o.stage, o.ran) for o in forced] == [("synthesize", False), ("validate", True)]


def test_broken_params_stop_the_flow_before_any_stage(workspace):
    from flows.retrain import retrain

    params = yaml.safe_load((workspace / "params.yaml").read_text())
    params["validate"]["max_actions"] = "lots"
    (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"validate\.max_actions"):
        retrain(workspace=str(workspace))
    assert not (workspace / "dvc.lock").exists() and not (workspace / "data").exists()


def test_a_failed_validation_is_not_retried(workspace):
    from flows.retrain import retrain

    params = yaml.safe_load((workspace / "params.yaml").read_text())
    params["validate"]["min_tasks_per_domain"] = 10_000
    (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    started = time.perf_counter()
    with pytest.raises(StageFailed) as info:
        retrain(workspace=str(workspace), until=["validate"])
    assert info.value.kind == "invalid" and not info.value.transient
    assert read_status(workspace, "validate")["kind"] == "invalid"
    assert time.perf_counter() - started < 60  # no retry back-off was waited


def test_a_stage_that_fails_once_succeeds_on_retry(workspace):
    """DVC's repository lock held by someone else makes the first attempt fail (a real transient
    failure); the task's retry runs after the lock is released."""
    from dvc.repo import Repo

    from flows.retrain import retrain

    released = {}
    holding = threading.Event()

    def hold_lock():
        with Repo(str(workspace)) as repo, repo.lock:
            holding.set()
            time.sleep(5)
            released["at"] = time.time()

    thread = threading.Thread(target=hold_lock)
    thread.start()
    holding.wait(30)
    outcomes = retrain(workspace=str(workspace), push_outputs=False, until=["validate"])
    thread.join()
    assert [o.ran for o in outcomes] == [True, True]
    # the successful attempt finished after the lock was released, so an earlier attempt failed
    assert read_status(workspace, "synthesize")["time"] > released["at"]
