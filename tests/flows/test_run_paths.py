"""`orchestra run` checks every params.yaml path up front: an output outside the workspace stops the
run on one line (file, key, path), exit 2, before DVC or any stage touches anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
