"""MLflow wiring shared by the stage runner and the flows: experiment, runs, lineage tags.

MLflow is imported inside the functions (it costs seconds at import).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from toolorchestra.core.settings import Settings
from toolorchestra.core.stopping import RUN_TOKEN_ENV, RUN_TOKEN_TAG, stops_prevail

PARENT_RUN_ENV = "ORCHESTRA_PARENT_RUN_ID"
FLOW_RUN_ENV = "ORCHESTRA_FLOW_RUN_ID"


def configure(settings: Settings) -> str:
    """Point MLflow at the settings' tracking URI; return the experiment id (created if new)."""
    import mlflow

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    if settings.mlflow.s3_endpoint_url or settings.s3_endpoint_url:
        os.environ.setdefault("MLFLOW_S3_ENDPOINT_URL", settings.mlflow.s3_endpoint_url or settings.s3_endpoint_url or "")
    if settings.tracking_uri.startswith("sqlite:///"):
        Path(settings.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(settings.tracking_uri)
    experiment = mlflow.get_experiment_by_name(settings.mlflow.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return mlflow.create_experiment(settings.mlflow.experiment, artifact_location=artifact_location(settings))
    except Exception:  # created concurrently by another process
        experiment = mlflow.get_experiment_by_name(settings.mlflow.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


def artifact_location(settings: Settings) -> str | None:
    """Where a new experiment keeps its artifacts: the configured root; else, with a tracking
    server, None (the server's own artifact store, e.g. `--artifacts-destination s3://...`);
    else the local default folder."""
    if settings.mlflow.artifact_root:
        return settings.mlflow.artifact_root
    if settings.tracking_uri.startswith(("http://", "https://", "databricks")):
        return None
    return settings.artifact_root


def git_commit(workspace: Path) -> tuple[str, bool]:
    """(commit sha, dirty) of the workspace; ("unknown", True) outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=workspace, capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=workspace,
                                capture_output=True, text=True, check=True, timeout=30).stdout
        return sha, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown", True


def read_lock(workspace: Path) -> dict[str, Any]:
    lock = workspace / "dvc.lock"
    if not lock.exists():
        return {}
    try:
        return yaml.safe_load(lock.read_text()) or {}
    except yaml.YAMLError:
        return {}


def _md5(entry: dict[str, Any]) -> str | None:
    return entry.get("md5") or entry.get("etag") or entry.get("checksum")


def input_hashes(workspace: Path, stage: str, deps: list[str]) -> dict[str, str]:
    """md5 of each input as dvc.lock records it.

    An input produced by another stage takes that stage's `outs` entry (written when it ran, so
    current); a raw input takes this stage's own `deps` entry (from its previous run).
    """
    stages = read_lock(workspace).get("stages", {}) or {}
    produced = {o["path"]: _md5(o) for s in stages.values() for o in (s.get("outs") or []) if "path" in o}
    own = {d["path"]: _md5(d) for d in (stages.get(stage, {}).get("deps") or []) if "path" in d}
    hashes = {}
    for dep in deps:
        md5 = produced.get(dep) or own.get(dep)
        if md5:
            hashes[dep] = md5
    return hashes


def flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(f"{prefix}.{key}" if prefix else str(key), item))
        return out
    return {prefix: value}


@contextlib.contextmanager
def ended_killed_on_stop() -> Iterator[None]:
    """A run stopped by Ctrl-C or SIGTERM ends KILLED (mlflow's own exit would say FAILED). Runs
    also carry the `orchestra run` token (`RUN_TOKEN_ENV`), so its watchdog can end them KILLED
    after a SIGKILL, when nothing in the run can (orchestra_cli/lifeline.py)."""
    import mlflow

    try:
        with stops_prevail():  # a stop that library cleanup turned into another error is a stop
            yield
    except BaseException as exc:
        if isinstance(exc, Exception):
            raise  # a failure: mlflow's own exit marks it FAILED
        # KeyboardInterrupt (Ctrl-C, `Stopped`), SystemExit, Prefect's TerminationSignal: a stop.
        mlflow.end_run("KILLED")
        raise


@contextlib.contextmanager
def stage_run(settings: Settings, stage: str, *, params: dict[str, Any], deps: list[str]) -> Iterator[Any]:
    """An MLflow run for one stage, child of the flow's run when `ORCHESTRA_PARENT_RUN_ID` is set."""
    import mlflow

    experiment_id = configure(settings)
    sha, dirty = git_commit(settings.workspace)
    tags = {"orchestra.stage": stage, "mlflow.source.git.commit": sha, "git.commit": sha, "git.dirty": str(dirty)}
    for path, md5 in input_hashes(settings.workspace, stage, deps).items():
        tags[f"dvc.dep.{path}"] = md5
    if os.environ.get(FLOW_RUN_ENV):
        tags["prefect.flow_run_id"] = os.environ[FLOW_RUN_ENV]
    if os.environ.get(RUN_TOKEN_ENV):
        tags[RUN_TOKEN_TAG] = os.environ[RUN_TOKEN_ENV]
    parent = os.environ.get(PARENT_RUN_ENV) or None
    # A stop while the parameters are logged ends the run KILLED too (it can cut an sqlite write short).
    with mlflow.start_run(experiment_id=experiment_id, run_name=stage, parent_run_id=parent, tags=tags) as run, \
            ended_killed_on_stop():
        flat = {k: v for k, v in flatten("", params).items()}
        # MLflow caps a param value at 6000 characters; long lists are summarised.
        mlflow.log_params({k: (str(v)[:500]) for k, v in flat.items()})
        yield run


@contextlib.contextmanager
def flow_run(settings: Settings, flow: str, *, flow_run_id: str | None = None,
             params: dict[str, Any] | None = None) -> Iterator[Any]:
    """The parent MLflow run of one flow run; stage runs started meanwhile become its children.

    On exit the run gets the `dvc.lock` it produced (as an artifact and its md5 as a tag), so the
    exact data versions stay findable even if that lock file is never committed.
    """
    import hashlib

    import mlflow

    experiment_id = configure(settings)
    sha, dirty = git_commit(settings.workspace)
    tags = {"orchestra.flow": flow, "git.commit": sha, "mlflow.source.git.commit": sha, "git.dirty": str(dirty)}
    if flow_run_id:
        tags["prefect.flow_run_id"] = flow_run_id
    if os.environ.get(RUN_TOKEN_ENV):
        tags[RUN_TOKEN_TAG] = os.environ[RUN_TOKEN_ENV]
    saved = {k: os.environ.get(k) for k in (PARENT_RUN_ENV, FLOW_RUN_ENV)}
    # The lock artifact (finally, below) is logged before a stopped run is ended KILLED.
    with mlflow.start_run(experiment_id=experiment_id, run_name=flow, tags=tags) as run, ended_killed_on_stop():
        os.environ[PARENT_RUN_ENV] = run.info.run_id
        if flow_run_id:
            os.environ[FLOW_RUN_ENV] = flow_run_id
        try:
            if params:
                mlflow.log_params({k: str(v)[:500] for k, v in flatten("", params).items()})
            yield run
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            lock = settings.workspace / "dvc.lock"
            if lock.exists():
                mlflow.set_tag("dvc.lock.md5", hashlib.md5(lock.read_bytes()).hexdigest())
                mlflow.log_artifact(str(lock))
