"""Lineage for auditors: from a registered model or a run back to the data, code and parameters.

`lineage(ref)` follows: model version -> the run that logged it -> the flow's parent run -> git
commit -> every stage's run (parameters, input hashes) -> the `dvc.lock` the flow produced (logged
on the parent run) -> the data paths and their md5s, with the commands that fetch exactly that data
using nothing but git, dvc and mlflow.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from stagekit.tracking import configure
from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.settings import Settings


def _client(settings: Settings):
    from mlflow import MlflowClient

    configure(settings)
    return MlflowClient(tracking_uri=settings.tracking_uri)


def resolve(client, ref: str) -> tuple[dict[str, Any] | None, Any]:
    """(model version info or None, the MLflow run it points to)."""
    from mlflow.exceptions import MlflowException

    try:
        if ref.startswith("models:/"):
            body = ref.removeprefix("models:/")
            if "@" in body:
                name, alias = body.split("@", 1)
                version = client.get_model_version_by_alias(name, alias)
            elif "/" in body:
                name, number = body.rsplit("/", 1)
                version = client.get_model_version(name, number)
            else:
                raise OrchestraError(f"{ref!r}: use models:/NAME@ALIAS or models:/NAME/VERSION")
            info = {"name": version.name, "version": version.version, "aliases": list(version.aliases or []),
                    "source": version.source, "run_id": version.run_id}
            return info, client.get_run(version.run_id)
        return None, client.get_run(ref)
    except MlflowException as exc:
        raise OrchestraError(f"cannot resolve {ref!r}: {exc.message}") from None


def _lock_of(client, run_id: str) -> dict[str, Any]:
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep --json output clean
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, "dvc.lock", tmp)
        except Exception:
            return {}
        return yaml.safe_load(Path(path).read_text()) or {}


def lineage(ref: str, settings: Settings) -> dict[str, Any]:
    client = _client(settings)
    model, run = resolve(client, ref)
    tags = run.data.tags
    flow_run = run
    if "orchestra.flow" not in tags and tags.get("mlflow.parentRunId"):
        flow_run = client.get_run(tags["mlflow.parentRunId"])
    if "orchestra.flow" not in flow_run.data.tags:
        raise OrchestraError(f"{ref!r} is not part of an orchestra flow run (no `orchestra.flow` tag)")
    flow_id = flow_run.info.run_id
    children = client.search_runs(
        [flow_run.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{flow_id}'",
        max_results=500,
    )
    lock = _lock_of(client, flow_id)
    lock_stages = lock.get("stages", {}) or {}
    stages = []
    for child in sorted(children, key=lambda r: r.info.start_time):
        name = child.data.tags.get("orchestra.stage", child.info.run_name)
        entry = lock_stages.get(name, {})
        stages.append({
            "stage": name,
            "run_id": child.info.run_id,
            "status": child.info.status,
            "params": dict(child.data.params),
            "metrics": dict(child.data.metrics),
            "input_hashes_at_run": {k.removeprefix("dvc.dep."): v for k, v in child.data.tags.items() if k.startswith("dvc.dep.")},
            "deps": [{"path": d.get("path"), "md5": d.get("md5")} for d in entry.get("deps", []) or []],
            "outs": [{"path": o.get("path"), "md5": o.get("md5")} for o in entry.get("outs", []) or []],
        })
    # Stages that were up to date in this flow run ran earlier; their hashes are still in the lock.
    seen = {s["stage"] for s in stages}
    for name, entry in lock_stages.items():
        if name not in seen:
            stages.append({
                "stage": name, "run_id": None, "status": "up to date (ran in an earlier flow)",
                "params": entry.get("params", {}),
                "deps": [{"path": d.get("path"), "md5": d.get("md5")} for d in entry.get("deps", []) or []],
                "outs": [{"path": o.get("path"), "md5": o.get("md5")} for o in entry.get("outs", []) or []],
            })
    commit = flow_run.data.tags.get("git.commit", "unknown")
    data_paths = sorted({o["path"] for s in stages for o in s["outs"] if o.get("path")})
    return {
        "ref": ref,
        "model": model,
        "run": {"run_id": run.info.run_id, "name": run.info.run_name, "stage": tags.get("orchestra.stage")},
        "flow_run": {
            "run_id": flow_id,
            "flow": flow_run.data.tags.get("orchestra.flow"),
            "prefect_flow_run_id": flow_run.data.tags.get("prefect.flow_run_id"),
            "git_commit": commit,
            "git_dirty": flow_run.data.tags.get("git.dirty") == "True",
            "dvc_lock_md5": flow_run.data.tags.get("dvc.lock.md5"),
            "tracking_uri": settings.tracking_uri,
        },
        "stages": stages,
        "data_paths": data_paths,
        "fetch": [
            f"git checkout {commit}",
            f"MLFLOW_TRACKING_URI={settings.tracking_uri} mlflow artifacts download --run-id {flow_id} "
            "--artifact-path dvc.lock --dst-path .",
            "dvc pull",
            "dvc status",
        ],
    }
