"""`orchestra run` checks every params.yaml path up front: an output outside the workspace stops the
run on one line (file, key, path), exit 2, before DVC or any stage touches anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.workspaces import make_project_workspace

ORCHESTRA = Path(sys.executable).parent / "orchestra"


def test_an_output_outside_the_workspace_stops_the_run_before_anything(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    ws = make_project_workspace(tmp_path / "ws", {"synthesize": {"outs": {"toolscale": str(victim), "qa": "data/qa"}}})
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(ORCHESTRA), "run"], cwd=ws, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert f"{ws / 'params.yaml'}: synthesize.outs.toolscale: output path '{victim}'" in err
    assert "outside the workspace" in err
    assert (victim / "precious.txt").read_text() == "keep me" and len(list(victim.iterdir())) == 1
    assert not (ws / "dvc.lock").exists() and not (ws / ".orchestra" / "stage-status").exists()


def test_force_of_an_unknown_stage_is_a_one_line_error(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    ws = make_project_workspace(tmp_path / "ws")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(ORCHESTRA), "run", "--force", "bogus"], cwd=ws, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1 and "--force: no stage bogus in dvc.yaml; stages: synthesize" in err, err


@pytest.mark.slow
def test_a_restore_from_dvcs_run_cache_clears_staging_leftovers(tmp_path, monkeypatch):
    from stagekit.graph import reproduce
    from stagekit.status import read_status

    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    tiny = {"domains": ["library"], "db_size": 12, "tasks_per_domain": 4, "qa_per_domain": 2}
    ws = make_project_workspace(tmp_path / "ws", {"synthesize": tiny})
    params = yaml.safe_load((ws / "params.yaml").read_text())

    def with_db_size(n: int) -> None:
        params["synthesize"]["db_size"] = n
        (ws / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    assert reproduce(ws, "synthesize").ran
    with_db_size(13)
    assert reproduce(ws, "synthesize").ran
    ran_at = read_status(ws, "synthesize")["time"]
    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover = ws / "data" / f".toolscale.staging-{gone.pid}"  # what a killed run leaves
    leftover.mkdir()
    with_db_size(12)  # back to a version DVC's run cache holds: restored, the stage does not run
    reproduce(ws, "synthesize")
    assert read_status(ws, "synthesize").get("time", ran_at) == ran_at
    assert not leftover.exists()
