"""The retrain flow on the cluster profile's real servers, all on loopback.

A Prefect server on PostgreSQL with a process work pool and worker; an MLflow tracking server on
PostgreSQL whose artifacts go to an S3 bucket (moto's server); a DVC S3 remote on the same store.
`orchestra deploy` registers prefect.yaml's deployments; `retrain` runs through the worker with
tiny parameters up to `validate`. Then: the flow run completed in Prefect, MLflow's runs are in
PostgreSQL with artifacts in the bucket, `dvc push` stored the data and `dvc pull` into a fresh
clone restores it byte for byte, and no planted secret appears in MLflow params/tags, Prefect
logs/artifacts or committed files.
"""

from __future__ import annotations

import filecmp
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cluster_services import BIN, PLANTED, Service, base_env, git, make_cluster_workspace

pytestmark = pytest.mark.slow
POOL = "orchestra"  # prefect.yaml's work pool
UNTIL = ["validate"]  # the cheap stages: synthesize, validate
UNTIL_STAGES = ["synthesize", "validate"]


@dataclass
class RetrainRun:
    workspace: Path
    flow_run: object
    worker: Service
    env: dict[str, str]


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def cluster_env(workspace: Path, mlflow_server, prefect_server, s3) -> dict[str, str]:
    """What a platform team puts in infra/cluster.env + infra/secrets.env for a worker."""
    return base_env(
        **s3.env,
        ORCHESTRA_PROFILE="cluster",
        ORCHESTRA_WORKSPACE=str(workspace),
        ORCHESTRA_PREFECT_API_URL=prefect_server.api_url,
        PREFECT_API_URL=prefect_server.api_url,
        PREFECT_HOME=str(workspace.parent / "prefect-client"),
        ORCHESTRA_MLFLOW__TRACKING_URI=mlflow_server.client_uri,
        ORCHESTRA_S3_ENDPOINT_URL=s3.endpoint,
        ORCHESTRA_DVC__REMOTE_URL=f"s3://{s3.dvc_bucket}/dvc",
        # a key the paper catalog names: present in the worker's environment, never to be logged
        VLLM_API_KEY=PLANTED["api_key"],
        OPENAI_API_KEY=PLANTED["api_key"],
    )


@pytest.fixture(scope="module")
def retrain_run(tmp_path_factory, mlflow_server, prefect_server, s3) -> RetrainRun:
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    root = tmp_path_factory.mktemp("cluster-flow")
    workspace = make_cluster_workspace(root / "ws")
    env = cluster_env(workspace, mlflow_server, prefect_server, s3)
    dvc = str(BIN / "dvc")
    # The DVC S3 remote: URL and endpoint committed, credentials only in .dvc/config.local.
    run([dvc, "remote", "add", "-d", "-f", "storage", f"s3://{s3.dvc_bucket}/dvc"], workspace, env)
    run([dvc, "remote", "modify", "storage", "endpointurl", s3.endpoint], workspace, env)
    run([dvc, "remote", "modify", "--local", "storage", "access_key_id", env["AWS_ACCESS_KEY_ID"]], workspace, env)
    run([dvc, "remote", "modify", "--local", "storage", "secret_access_key", PLANTED["aws_secret"]], workspace, env)
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "DVC remote on S3")

    run([str(BIN / "prefect"), "work-pool", "create", POOL, "--type", "process"], workspace, env)
    run([str(BIN / "orchestra"), "deploy"], workspace, env)
    worker = Service("prefect worker", [str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--type", "process"],
                     env, workspace, root / "worker.log").start()
    try:
        with temporary_settings({PREFECT_API_URL: prefect_server.api_url}):
            flow_run = run_deployment("retrain/retrain-weekly", parameters={"until": UNTIL}, timeout=420)
        assert flow_run.state is not None and flow_run.state.is_completed(), (
            f"flow run {flow_run.id} ended {flow_run.state}:\n{worker.tail(6000)}")
        yield RetrainRun(workspace, flow_run, worker, env)
    finally:
        worker.stop()


def test_deployment_ran_through_the_worker_and_completed(retrain_run, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: prefect_server.api_url}), get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(retrain_run.flow_run.id)
        deployment = client.read_deployment(flow_run.deployment_id)
        schedules = [s.schedule.cron for s in deployment.schedules]
    assert flow_run.state.type.value == "COMPLETED"
    assert flow_run.parameters["until"] == UNTIL
    assert deployment.name == "retrain-weekly" and deployment.work_pool_name == POOL
    assert schedules == ["0 3 * * 1"]  # the weekly schedule prefect.yaml declares
    # the worker (not this process) ran it, in a process of its own
    assert flow_run.work_pool_name == POOL and flow_run.infrastructure_pid
    assert str(flow_run.id) in retrain_run.worker.tail(50000)
    assert (retrain_run.workspace / "data" / "validated").is_dir()


def test_mlflow_runs_in_postgres_with_artifacts_in_the_bucket(retrain_run, mlflow_server, postgres, s3):
    rows = postgres.query(mlflow_server.database, """
        SELECT r.run_uuid, r.status, r.artifact_uri, t.key, t.value FROM runs r
        JOIN tags t ON t.run_uuid = r.run_uuid
        WHERE t.key IN ('orchestra.stage', 'orchestra.flow', 'prefect.flow_run_id', 'mlflow.parentRunId')""")
    runs: dict[str, dict[str, str]] = {}
    for run_id, status, artifact_uri, key, value in rows:
        runs.setdefault(run_id, {"status": status, "artifact_uri": artifact_uri})[key] = value
    flow_id = str(retrain_run.flow_run.id)
    parents = [r for r, t in runs.items() if t.get("orchestra.flow") == "retrain" and t.get("prefect.flow_run_id") == flow_id]
    assert len(parents) == 1, runs
    parent = parents[0]
    children = {t["orchestra.stage"]: t for t in runs.values() if t.get("mlflow.parentRunId") == parent}
    assert sorted(children) == ["synthesize", "validate"]
    assert all(t["status"] == "FINISHED" and t["prefect.flow_run_id"] == flow_id for t in children.values())
    # Artifacts are proxied by the server to S3: nothing in a local folder of the worker.
    assert runs[parent]["artifact_uri"].startswith("mlflow-artifacts:")
    assert not (retrain_run.workspace / ".orchestra" / "mlartifacts").exists()
    keys = s3.keys(s3.mlflow_bucket, "artifacts/")
    assert any(k.endswith(f"{parent}/artifacts/dvc.lock") for k in keys), keys
    # metrics too, in PostgreSQL
    metrics = dict(postgres.query(mlflow_server.database, "SELECT key, value FROM latest_metrics WHERE run_uuid = %s",
                                  (parent,)))
    assert metrics["validate.tasks_kept"] > 0


def test_dvc_push_then_pull_into_a_fresh_clone_restores_the_data(retrain_run, s3, tmp_path):
    workspace, env = retrain_run.workspace, retrain_run.env
    lock = yaml.safe_load((workspace / "dvc.lock").read_text())["stages"]
    outs = [o["path"] for stage in UNTIL_STAGES for o in lock[stage]["outs"]]
    assert len(s3.keys(s3.dvc_bucket, "dvc/")) > 5  # `dvc push` at the end of the flow
    git(workspace, "add", "dvc.lock")
    git(workspace, "commit", "-q", "-m", "retrain outputs")

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(workspace), str(clone))
    assert not (clone / ".dvc" / "config.local").exists()  # credentials stay on the machine they were put on
    assert not (clone / "data").exists()
    # a fresh machine: credentials from its environment, the remote's URL and endpoint from git
    run([str(BIN / "dvc"), "pull", *UNTIL_STAGES], clone, env)
    for path in outs:
        original, pulled = workspace / path, clone / path
        files = sorted(p.relative_to(original) for p in original.rglob("*") if p.is_file())
        assert files and files == sorted(p.relative_to(pulled) for p in pulled.rglob("*") if p.is_file()), path
        match, mismatch, errors = filecmp.cmpfiles(original, pulled, [str(f) for f in files], shallow=False)
        assert not mismatch and not errors, (path, mismatch, errors)


def _leaks(text: str) -> list[str]:
    return [name for name, value in PLANTED.items() if value in text]


def test_no_planted_secret_in_mlflow_prefect_or_committed_files(retrain_run, mlflow_server, prefect_server,
                                                               postgres):
    # MLflow: every param, run tag and experiment tag, in the server's database
    mlflow_rows = postgres.query(mlflow_server.database, """
        SELECT 'param', key, value FROM params UNION ALL SELECT 'tag', key, value FROM tags
        UNION ALL SELECT 'experiment_tag', key, value FROM experiment_tags
        UNION ALL SELECT 'run', name, artifact_uri FROM runs""")
    assert len(mlflow_rows) > 10
    assert _leaks(json.dumps(mlflow_rows)) == []
    # Prefect: every log line, artifact, parameter and state message of every run, in its database
    prefect_rows = postgres.query(prefect_server.database, """
        SELECT 'log', t::text FROM log t UNION ALL SELECT 'artifact', t::text FROM artifact t
        UNION ALL SELECT 'flow_run', t::text FROM flow_run t UNION ALL SELECT 'task_run', t::text FROM task_run t
        UNION ALL SELECT 'deployment', t::text FROM deployment t
        UNION ALL SELECT 'state', t::text FROM flow_run_state t""")
    assert sum(1 for kind, _ in prefect_rows if kind == "log") > 5
    assert _leaks(json.dumps(prefect_rows)) == []
    # committed files: everything git tracks in the workspace after the run (dvc.lock, .dvc/config, ...)
    workspace = retrain_run.workspace
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "--allow-empty", "-m", "everything")
    tracked = git(workspace, "ls-files").splitlines()
    assert ".dvc/config" in tracked and ".dvc/config.local" not in tracked
    leaked = {path: _leaks((workspace / path).read_text(errors="replace")) for path in tracked}
    assert {p: names for p, names in leaked.items() if names} == {}
    # ... while the secret did reach where it belongs (so the search above could have found it)
    assert PLANTED["aws_secret"] in (workspace / ".dvc" / "config.local").read_text()
