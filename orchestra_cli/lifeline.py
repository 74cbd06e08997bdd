"""`orchestra run` leaves no process behind, however it ends.

* SIGTERM (or Ctrl-C) to the run: `forward_stop` passes the signal to the stage processes (DVC's
  shell and `orchestra stage`, which records the stage `killed` and ends its MLflow run KILLED),
  waits up to `STOP_GRACE_S` for them, then the run unwinds as `Stopped` (never retried).
* SIGKILL of the run (nothing in it can react): a watchdog started with it, in its own session,
  holds a pidfd of the run and keeps a list of the run's descendants (the Prefect server, DVC's
  shell, the stage and its children). When the run dies, it sends SIGTERM to every one still
  alive (same pid *and* start time, so a reused pid is never hit), then SIGKILL after
  `STOP_GRACE_S`, and exits. A process the run started within the last `SCAN_S` before dying can
  be missed only if it also outlives its own parent; the stage and the server are long-lived.
  Then it ends the MLflow runs still RUNNING that carry the run's token as KILLED.

`python -m orchestra_cli.lifeline PID TOKEN TRACKING_URI` is the watchdog (psutil while it waits;
mlflow only once the run is gone).
"""

from __future__ import annotations

import os
import secrets
import select
import signal
import subprocess
import sys

import psutil

STOP_GRACE_S = 10.0
"""How long stopped processes get to clean up (status file, MLflow run) before SIGKILL."""
SCAN_S = 0.5
"""How often the watchdog refreshes its list of the run's descendants."""


def start_watchdog(tracking_uri: str) -> subprocess.Popen[bytes]:
    """The watchdog of this process (see the module docstring). Everything the run starts, and
    every MLflow run it opens, carries the run's token (`ORCHESTRA_RUN_TOKEN`)."""
    from toolorchestra.core.stopping import RUN_TOKEN_ENV

    token = os.environ.setdefault(RUN_TOKEN_ENV, secrets.token_hex(8))
    return subprocess.Popen([sys.executable, "-m", "orchestra_cli.lifeline", str(os.getpid()), token, tracking_uri],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def _is_prefect_server(proc: psutil.Process) -> bool:
    try:
        return "uvicorn" in proc.cmdline() and any("prefect" in part for part in proc.cmdline())
    except psutil.Error:
        return False


def forward_stop(signum: int, *, exclude: set[int] | None = None) -> None:
    """Pass a stop signal to this process's stage processes and wait for them (not the Prefect
    server: the run still reports its stop to it)."""
    exclude = exclude or set()
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    stages = [p for p in children if p.pid not in exclude and not _is_prefect_server(p)]
    for proc in stages:
        try:
            proc.send_signal(signum)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(stages, timeout=STOP_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


def _descendants(run: psutil.Process) -> dict[int, float]:
    found = {}
    for proc in run.children(recursive=True):
        try:
            found[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return found


def watch(pid: int) -> None:
    """Wait for `pid` to die, then stop whatever it left running."""
    try:
        run = psutil.Process(pid)
        pidfd = os.pidfd_open(pid)
    except (psutil.Error, OSError):
        return
    me = os.getpid()
    known: dict[int, float] = {}
    while True:
        try:
            known.update({p: t for p, t in _descendants(run).items() if p != me})
        except psutil.Error:
            break
        if select.select([pidfd], [], [], SCAN_S)[0]:
            break  # the run exited
    victims: dict[int, psutil.Process] = {}
    for child, started in known.items():
        try:
            proc = psutil.Process(child)
            if proc.create_time() != started:
                continue  # the pid was reused: not ours
            victims[child] = proc
            for grandchild in proc.children(recursive=True):
                victims.setdefault(grandchild.pid, grandchild)
        except psutil.Error:
            continue
    victims.pop(me, None)
    for proc in victims.values():
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(list(victims.values()), timeout=STOP_GRACE_S)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass


def end_runs_killed(token: str, tracking_uri: str) -> int:
    """End the MLflow runs the dead run left RUNNING (found by its token) as KILLED."""
    from mlflow.tracking import MlflowClient

    from toolorchestra.core.stopping import RUN_TOKEN_TAG

    client = MlflowClient(tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return 0
    runs = client.search_runs(experiments, f"tags.`{RUN_TOKEN_TAG}` = '{token}' and attributes.status = 'RUNNING'")
    for run in runs:
        client.set_terminated(run.info.run_id, "KILLED")
    return len(runs)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the run's to handle, not ours
    watch(int(sys.argv[1]))
    end_runs_killed(sys.argv[2], sys.argv[3])


def start_detached_prefect_server() -> None:
    """Start Prefect's ephemeral API server now, in its own session.

    Prefect starts it lazily as a plain child, so a Ctrl-C or a SIGTERM to the run's process group
    kills it too, and the run then spends minutes retrying to report its stop to a dead server.
    Prefect shares one instance per process (`SubprocessASGIServer()` is a singleton keyed by
    port), so the one made here, detached, is the one the flow uses; it is stopped at exit as
    usual, and by the watchdog after a SIGKILL of the run.
    """
    import functools
    from unittest import mock

    from prefect.server.api import server as prefect_server

    detached = functools.partial(subprocess.Popen, start_new_session=True)
    with mock.patch.object(prefect_server.subprocess, "Popen", detached):
        prefect_server.SubprocessASGIServer().start()
