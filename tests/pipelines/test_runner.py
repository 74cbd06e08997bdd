"""The stage runner: parameters, atomic outputs, MLflow lineage tags."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import types

import pytest
import yaml

from stagekit.contract import StageParams
from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.core.settings import Settings


class Params(StageParams):
    factor: int = 2
    seed: int = 0
    fail: bool = False


def fake_run(params, paths):
    text = (paths.deps["source"]).read_text()
    (paths.outs["table"]).write_text(text * params.factor)
    (paths.outs["folder"] / "part.json").write_text(json.dumps({"seed": params.seed}))
    if params.fail:
        raise RuntimeError("crashed mid-stage")
    return {"rows": 3, "ratio": 0.5}


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    module = types.ModuleType("pipelines.fakestage")
    module.Params, module.run = Params, fake_run
    monkeypatch.setitem(sys.modules, "pipelines.fakestage", module)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "source.txt").write_text("abc")
    write_params(tmp_path, {})
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"],
                   cwd=tmp_path, check=True)
    return tmp_path


def write_params(root, extra):
    section = {"deps": {"source": "data/source.txt"}, "outs": {"table": "out/table.txt", "folder": "out/parts"}, **extra}
    (root / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 7}, "fakestage": section}))


def settings(root):
    return Settings(workspace=root)


def test_outputs_move_into_place_and_base_keys_are_passed(workspace):
    metrics = run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    assert metrics["rows"] == 3.0 and metrics["stage_seconds"] > 0
    assert (workspace / "out/table.txt").read_text() == "abcabc"
    assert json.loads((workspace / "out/parts/part.json").read_text()) == {"seed": 7}
    assert not list((workspace / "out").glob(".*staging*"))


def test_a_crash_mid_stage_leaves_previous_outputs_untouched(workspace):
    run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    write_params(workspace, {"factor": 3, "fail": True})
    with pytest.raises(RuntimeError, match="crashed mid-stage"):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    assert (workspace / "out/table.txt").read_text() == "abcabc"  # the old, complete output
    assert not list((workspace / "out").glob(".*staging*"))


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"factor": "many"}, "fakestage.factor: Input should be a valid integer"),
        ({"surprise": 1}, "fakestage.surprise: Extra inputs are not permitted"),
    ],
)
def test_broken_params_name_file_key_and_reason(workspace, extra, needle):
    write_params(workspace, extra)
    with pytest.raises(ConfigError) as info:
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    assert str(workspace / "params.yaml") in str(info.value) and needle in str(info.value)


def test_invalid_yaml_and_unknown_stage(workspace):
    (workspace / "params.yaml").write_text("fakestage: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML at line"):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    with pytest.raises(ConfigError, match="no stage 'nosuchstage'"):
        run_stage("nosuchstage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    with pytest.raises(ConfigError, match="not a stage name"):
        run_stage("../runner", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    # The stage framework lives outside the stages' namespace: its modules are no stages.
    with pytest.raises(ConfigError, match="no stage 'runner'"):
        run_stage("runner", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)


def test_missing_input_is_reported_before_running(workspace):
    (workspace / "data" / "source.txt").unlink()
    with pytest.raises(ConfigError, match="inputs do not exist: source=data/source.txt"):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)


def test_non_numeric_metrics_are_rejected(workspace, monkeypatch):
    monkeypatch.setattr(sys.modules["pipelines.fakestage"], "run", lambda p, paths: {"x": float("nan")})
    with pytest.raises(OrchestraError, match="'x' is not a finite number"):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)


def test_mlflow_child_run_with_lineage_tags(workspace, monkeypatch):
    import mlflow

    (workspace / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {
        "upstream": {"cmd": "x", "outs": [{"path": "data/source.txt", "hash": "md5", "md5": "0123abcd"}]},
    }}))
    s = settings(workspace)
    mlflow.set_tracking_uri(s.tracking_uri)
    from stagekit.tracking import configure

    experiment = configure(s)
    with mlflow.start_run(experiment_id=experiment, run_name="flow") as parent:
        parent_id = parent.info.run_id
    monkeypatch.setenv("ORCHESTRA_PARENT_RUN_ID", parent_id)
    monkeypatch.setenv("ORCHESTRA_FLOW_RUN_ID", "flow-run-42")
    run_stage("fakestage", params_file=workspace / "params.yaml", settings=s)
    runs = mlflow.search_runs([experiment], filter_string="tags.`orchestra.stage` = 'fakestage'", output_format="list")
    assert len(runs) == 1
    run = runs[0]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=workspace, capture_output=True, text=True).stdout.strip()
    assert run.data.tags["git.commit"] == head
    assert run.data.tags["dvc.dep.data/source.txt"] == "0123abcd"
    assert run.data.tags["mlflow.parentRunId"] == parent_id
    assert run.data.tags["prefect.flow_run_id"] == "flow-run-42"
    assert run.data.params["factor"] == "2" and run.data.params["seed"] == "7"
    assert run.data.metrics["rows"] == 3.0
    assert str(workspace / ".orchestra") in run.info.artifact_uri


def test_partial_outputs_of_a_failed_stage_are_kept_aside(workspace):
    write_params(workspace, {"fail": True})
    with pytest.raises(RuntimeError):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)
    kept = workspace / ".orchestra" / "failed" / "fakestage"
    assert (kept / "table").read_text() == "abcabc" and (kept / "folder" / "part.json").exists()
    assert not (workspace / "out" / "table.txt").exists()
    from stagekit.status import read_status

    assert read_status(workspace, "fakestage")["kind"] == "crash"


def test_a_stopped_stage_is_recorded_killed_and_its_mlflow_run_ends_killed(workspace, monkeypatch):
    """Ctrl-C or SIGTERM mid-stage (`Stopped`) is a stop, not a crash: status `killed` (the flow
    never retries it), MLflow run KILLED (not FAILED), and no output reaches its final path."""
    import mlflow

    from stagekit.graph import StageFailed
    from stagekit.status import read_status
    from toolorchestra.core.stopping import Stopped

    def stopped_run(params, paths):
        (paths.outs["table"]).write_text("partial")
        raise Stopped(signal.SIGTERM)

    monkeypatch.setattr(sys.modules["pipelines.fakestage"], "run", stopped_run)
    s = settings(workspace)
    with pytest.raises(Stopped):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=s)
    assert read_status(workspace, "fakestage") | {"time": 0} == {
        "stage": "fakestage", "ok": False, "kind": "killed", "message": "stopped by SIGTERM", "metrics": {}, "time": 0}
    assert not StageFailed("fakestage", "killed", "stopped by SIGTERM").transient
    mlflow.set_tracking_uri(s.tracking_uri)
    from stagekit.tracking import configure

    runs = mlflow.search_runs([configure(s)], output_format="list")
    assert [r.info.status for r in runs] == ["KILLED"]
    assert not (workspace / "out" / "table.txt").exists()


def test_a_stop_that_cleanup_turned_into_another_error_is_still_a_stop(workspace, monkeypatch):
    """Before: Ctrl-C cut an sqlite write of MLflow short, its rollback raised "database is locked"
    instead, the stage was recorded a crash and the flow retried it: the run ended 0, not 130."""
    import mlflow

    from stagekit.status import read_status
    from toolorchestra.core.stopping import Stopped

    def interrupted_run(params, paths):
        try:
            raise Stopped(signal.SIGINT)  # the signal handler, inside library code
        except KeyboardInterrupt:
            raise RuntimeError("(sqlite3.OperationalError) database is locked") from None

    monkeypatch.setattr(sys.modules["pipelines.fakestage"], "run", interrupted_run)
    s = settings(workspace)
    with pytest.raises(Stopped) as stopped:
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=s)
    assert isinstance(stopped.value.__cause__, RuntimeError)
    assert read_status(workspace, "fakestage")["kind"] == "killed"
    mlflow.set_tracking_uri(s.tracking_uri)
    from stagekit.tracking import configure

    assert [r.info.status for r in mlflow.search_runs([configure(s)], output_format="list")] == ["KILLED"]
    monkeypatch.setattr(sys.modules["pipelines.fakestage"], "run", lambda params, paths: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # a later failure of the same process is a failure again
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=s)
    assert read_status(workspace, "fakestage")["kind"] == "crash"


def test_a_key_written_twice_is_an_error_naming_the_line(workspace):
    (workspace / "params.yaml").write_text("fakestage:\n  factor: 2\n  deps: {source: data/source.txt}\n"
                                          "  factor: 3\n")
    with pytest.raises(ConfigError, match=r"params.yaml: invalid YAML at line 4, column 3: duplicate key 'factor' "
                                          r"\(first at line 2\)"):
        run_stage("fakestage", params_file=workspace / "params.yaml", settings=settings(workspace), track=False)


def test_an_unknown_section_is_refused_up_front(workspace):
    from stagekit.runner import check_all_params

    (workspace / "params.yaml").write_text(yaml.safe_dump({"base": {}, "fakestage": {}, "synthesise": {"db_size": 9}}))
    with pytest.raises(ConfigError, match="params.yaml: synthesise: unknown section: no stage 'synthesise'"):
        check_all_params(workspace / "params.yaml", ["fakestage"], settings(workspace))
