"""Stopping `orchestra run` (subprocesses, as a user does): Ctrl-C and SIGTERM stop it within
seconds with the stage recorded `killed` (not retried) and the MLflow runs KILLED; a SIGKILL of the
main process leaves no child running (the watchdog) and no run RUNNING. No orphan, in every case:
each run is marked by an environment variable that all its descendants inherit."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from helpers.workspaces import make_project_workspace

ORCHESTRA = Path(sys.executable).parent / "orchestra"
pytestmark = pytest.mark.slow
# Big enough that synthesize runs for many seconds after its staging folder appears.
SLOW_SYNTHESIS = {"synthesize": {"domains": ["library"], "db_size": 400, "tasks_per_domain": 3000, "qa_per_domain": 1000}}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    saved = {k: os.environ.pop(k) for k in [k for k in os.environ if k.startswith("ORCHESTRA_")]}
    yield make_project_workspace(tmp_path_factory.mktemp("stops") / "ws", SLOW_SYNTHESIS)
    os.environ.update(saved)


def marked(mark: str) -> list[str]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("STOP_TEST_MARK") == mark:
                found.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            continue
    return found


def run_and_stop(workspace: Path, send) -> tuple[subprocess.Popen, str, float, str]:
    mark = uuid.uuid4().hex
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "STOP_TEST_MARK": mark}
    proc = subprocess.Popen([str(ORCHESTRA), "run", "--until", "synthesize", "--no-push"], cwd=workspace, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 300
    while not list((workspace / "data").glob(".toolscale.staging-*")):
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() is not None else "slow"
        time.sleep(0.1)
    time.sleep(1.5)  # the stage is well inside its work
    started = time.time()
    send(proc)
    out, _ = proc.communicate(timeout=120)
    return proc, out, time.time() - started, mark


def runs(workspace: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(workspace / ".orchestra" / "mlflow.db") as db:
        return db.execute("select name, status from runs order by start_time").fetchall()


def assert_nothing_left(workspace: Path, mark: str) -> None:
    deadline = time.time() + 30  # the watchdog's grace period (10 s) and its MLflow update included
    while marked(mark) and time.time() < deadline:
        time.sleep(0.5)
    assert not marked(mark), marked(mark)
    lock = workspace / "dvc.lock"
    assert not lock.exists() or "synthesize" not in (yaml.safe_load(lock.read_text()) or {}).get("stages", {})
    assert not (workspace / "data" / "toolscale").exists()  # nothing unrecorded reached a final path
    assert not [status for _, status in runs(workspace) if status == "RUNNING"], runs(workspace)


@pytest.mark.parametrize(("how", "send", "code"), [
    ("ctrl-c", lambda p: os.killpg(p.pid, signal.SIGINT), 130),
    ("sigterm", lambda p: os.kill(p.pid, signal.SIGTERM), 143),
])
def test_ctrl_c_and_sigterm_stop_the_run_within_seconds(workspace, how, send, code):
    before = len(runs(workspace)) if (workspace / ".orchestra" / "mlflow.db").exists() else 0
    proc, out, took, mark = run_and_stop(workspace, send)
    assert proc.returncode == code, out
    assert took < 30, (took, out)
    assert out.count("Running stage 'synthesize'") <= 2 and "Retrying" not in out, out  # logged once per run
    assert "Traceback" not in out, out
    status = json.loads((workspace / ".orchestra" / "stage-status" / "synthesize.json").read_text())
    assert status["kind"] == "killed", status
    new = runs(workspace)[before:]
    assert ("retrain", "KILLED") in new and all(s == "KILLED" for _, s in new), new
    assert_nothing_left(workspace, mark)


def test_sigkill_of_the_main_process_leaves_no_child_running(workspace):
    before = len(runs(workspace)) if (workspace / ".orchestra" / "mlflow.db").exists() else 0
    proc, out, _, mark = run_and_stop(workspace, lambda p: os.kill(p.pid, signal.SIGKILL))
    assert proc.returncode == -signal.SIGKILL
    assert_nothing_left(workspace, mark)
    # This invocation's runs (the flow's and, when it had started, its stage's): all KILLED. Not
    # `runs[-1]`: whether the stage's run starts before the kill depends on the machine's load.
    new = runs(workspace)[before:]
    assert ("retrain", "KILLED") in new and all(s == "KILLED" for _, s in new), new
