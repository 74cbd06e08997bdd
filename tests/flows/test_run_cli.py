"""`orchestra run` as a user runs it (subprocesses): a killed stage resumes, concurrent runs are safe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ORCHESTRA = Path(sys.executable).parent / "orchestra"
pytestmark = pytest.mark.slow


def start(workspace: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen([str(ORCHESTRA), "run", *args], cwd=workspace, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def lock_stages(workspace: Path) -> set[str]:
    lock = workspace / "dvc.lock"
    return set((yaml.safe_load(lock.read_text()) or {}).get("stages", {})) if lock.exists() else set()


def test_a_killed_stage_leaves_nothing_complete_and_the_next_run_resumes_there(workspace):
    proc = start(workspace, "--until", "validate")
    deadline = time.time() + 240
    while time.time() < deadline and not list((workspace / "data").glob(".validated.staging-*")):
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the node dies mid-stage
    proc.wait()
    assert not (workspace / "data" / "validated").exists()
    assert lock_stages(workspace) == {"synthesize"}

    again = start(workspace, "--until", "validate")
    out, _ = again.communicate(timeout=400)
    assert again.returncode == 0, out
    assert "synthesize  up to date" in out and "validate    ran" in out
    assert (workspace / "data" / "validated").is_dir()
    assert not list((workspace / "data").glob(".*staging*"))


def test_concurrent_runs_on_one_workspace(workspace):
    first, second = start(workspace, "--until", "validate"), start(workspace, "--until", "validate")
    out1, _ = first.communicate(timeout=400)
    out2, _ = second.communicate(timeout=400)
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 2], out1 + out2
    loser = out1 if first.returncode else out2
    assert "another `orchestra run` is using this workspace" in loser
    assert lock_stages(workspace) == {"synthesize", "validate"}
    status = subprocess.run([str(Path(sys.executable).parent / "dvc"), "status", "validate", "--with-deps"],
                            cwd=workspace, capture_output=True, text=True)
    assert "up to date" in status.stdout
    # with --wait the second run queues behind the first instead of failing
    waiting = [start(workspace, "--until", "validate", "--wait", "300") for _ in range(2)]
    assert [p.wait(timeout=400) for p in waiting] == [0, 0]


def test_run_with_the_toy_profile_file(tmp_path, monkeypatch):
    """`orchestra run --params params/tiny.yaml` on a workspace with the default params.yaml: the
    profile replaces params.yaml (which DVC reads) and the stages run with its sizes."""
    from helpers.workspaces import TINY_PROFILE, make_project_workspace

    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    workspace = make_project_workspace(tmp_path / "ws", folders=("params",))
    proc = start(workspace, "--params", "params/tiny.yaml", "--until", "synthesize", "--no-push")
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    assert (workspace / "params.yaml").read_text() == TINY_PROFILE.read_text()
    assert lock_stages(workspace) == {"synthesize"}
    # the embedded library domain and the vendored databases: movie (trained on) and restaurant
    # (the profile's unseen domain)
    assert sorted(p.name for p in (workspace / "data" / "toolscale").iterdir()) == ["library", "movie", "restaurant"]
    tasks = yaml.safe_load((workspace / "data" / "toolscale" / "library" / "tasks.json").read_text())
    assert len(tasks) == yaml.safe_load(TINY_PROFILE.read_text())["synthesize"]["tasks_per_domain"]
