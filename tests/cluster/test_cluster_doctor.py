"""`orchestra doctor` against the real servers of the cluster profile: everything reachable, then
everything pointed at closed ports (each failure with its fix), and no secret printed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cluster_services import BIN, PLANTED, base_env, free_port, make_cluster_workspace

pytestmark = pytest.mark.slow
KEY_ENV = "ORCHESTRA_TEST_EXPERT_KEY"
SERVICES = {"mlflow tracking", "mlflow artifacts", "prefect api", "s3 endpoint", "dvc remote", "ray", "expert smol"}


def catalog_file(folder: Path, base_url: str) -> Path:
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump({
        "models": {"smol": {"backend": {"kind": "openai", "model": "smollm2", "base_url": base_url,
                                        "api_key_env": KEY_ENV}}},
        "tools": [{"name": "answer", "kind": "llm", "description": "Expert answers.",
                   "backend": {"type": "expert", "role": "answer", "models": ["smol"]}}],
    }))
    return path


def doctor(workspace: Path, catalog: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "orchestra"), "doctor", "--catalog", str(catalog), "--timeout", "3", *extra],
                          cwd=workspace, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster_workspace(tmp_path_factory, s3) -> Path:
    workspace = make_cluster_workspace(tmp_path_factory.mktemp("doctor") / "ws")
    env = base_env(**s3.env)
    for args in (["remote", "add", "-d", "-f", "storage", f"s3://{s3.dvc_bucket}/dvc"],
                 ["remote", "modify", "storage", "endpointurl", s3.endpoint],
                 ["remote", "modify", "--local", "storage", "access_key_id", s3.env["AWS_ACCESS_KEY_ID"]],
                 ["remote", "modify", "--local", "storage", "secret_access_key", PLANTED["aws_secret"]]):
        subprocess.run([str(BIN / "dvc"), *args], cwd=workspace, env=env, check=True, capture_output=True)
    return workspace


def test_every_service_reachable(cluster_workspace, mlflow_server, prefect_server, s3, ray_head, llama_server):
    catalog = catalog_file(cluster_workspace.parent, llama_server.base_url)
    env = base_env(**s3.env, ORCHESTRA_PROFILE="cluster", ORCHESTRA_MLFLOW__TRACKING_URI=mlflow_server.client_uri,
                   ORCHESTRA_PREFECT_API_URL=prefect_server.api_url, ORCHESTRA_S3_ENDPOINT_URL=s3.endpoint,
                   ORCHESTRA_DVC__REMOTE_URL=f"s3://{s3.dvc_bucket}/dvc", ORCHESTRA_RAY_ADDRESS=ray_head.address,
                   **{KEY_ENV: PLANTED["api_key"]})
    proc = doctor(cluster_workspace, catalog, env, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["service"]: c for c in json.loads(proc.stdout)}
    assert SERVICES <= set(checks)
    assert {s: checks[s]["status"] for s in SERVICES} == dict.fromkeys(SERVICES, "reachable"), checks
    assert "smollm2" in checks["expert smol"]["detail"]

    text = doctor(cluster_workspace, catalog, env)
    assert text.returncode == 0 and "profile cluster" in text.stdout and "!!" not in text.stdout
    for output in (proc.stdout, text.stdout + text.stderr):
        assert not [name for name, value in PLANTED.items() if value in output]
    assert "orchestra:***@127.0.0.1" in text.stdout  # the tracking URI, shown redacted


def test_unreachable_services_each_get_a_fix(cluster_workspace, s3, llama_server, tmp_path):
    closed = {name: free_port() for name in ("mlflow", "prefect", "s3", "ray")}
    catalog = catalog_file(tmp_path, llama_server.base_url)
    env = base_env(ORCHESTRA_PROFILE="cluster", ORCHESTRA_MLFLOW__TRACKING_URI=f"http://127.0.0.1:{closed['mlflow']}",
                   ORCHESTRA_PREFECT_API_URL=f"http://127.0.0.1:{closed['prefect']}/api",
                   ORCHESTRA_S3_ENDPOINT_URL=f"http://127.0.0.1:{closed['s3']}",
                   ORCHESTRA_DVC__REMOTE_URL="s3://another-bucket/dvc",
                   ORCHESTRA_RAY_ADDRESS=f"127.0.0.1:{closed['ray']}")  # and no expert key: the server says 401
    proc = doctor(cluster_workspace, catalog, env, "--json")
    assert proc.returncode == 2
    checks = {c["service"]: c for c in json.loads(proc.stdout)}
    assert {s: checks[s]["failed"] for s in SERVICES} == dict.fromkeys(SERVICES, True), checks
    assert checks["dvc remote"]["status"] == "misconfigured"  # DVC pushes elsewhere than the settings say
    assert "401" in checks["expert smol"]["detail"] and f"set {KEY_ENV}" in checks["expert smol"]["fix"]
    assert "ORCHESTRA_PREFECT_API_URL" in checks["prefect api"]["fix"]
    assert "ray start --head" in checks["ray"]["fix"]
    assert all(checks[s]["fix"] for s in SERVICES)

    text = doctor(cluster_workspace, catalog, env)
    assert text.returncode == 2
    assert text.stdout.count("fix: ") >= len(SERVICES)
    assert "check(s) failed" in text.stdout + text.stderr
