"""Real servers of the cluster profile on loopback, started and stopped by fixtures.

Every server runs as a child process in its own session (so stopping it stops everything it
started, and nothing else), on a free port, with its state in a temporary folder:

- `postgres`: the local PostgreSQL (127.0.0.1:5432, user `postgres`; `ORCHESTRA_TEST_PG_*` to
  change); a fresh database per use, dropped at the end of the session. URLs carry a planted
  password (`PLANTED["db_password"]`): trust authentication ignores it, a leak would show it.
- `s3`: moto's S3 server (`ThreadedMotoServer`) with the buckets `orchestra-mlflow` and
  `orchestra-dvc`; credentials in the environment (the secret key is planted too).
- `mlflow_server`: `mlflow server` on PostgreSQL, proxying artifacts to `s3://orchestra-mlflow/`.
- `prefect_server`: `prefect server start` on PostgreSQL (asyncpg).
- `ray_head`: `ray start --head --block` (stopped by killing its process group, never `ray stop`,
  which would stop every Ray instance on the machine).
- `llama_server`: llama-cpp-python's OpenAI-compatible server with SmolLM2's GGUF.

Skipped (with the reason) when PostgreSQL is not reachable or llama-cpp-python is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from helpers.workspaces import REPO, TINY_PROFILE, git, make_project_workspace  # noqa: F401 - git is re-exported to the tests

BIN = Path(sys.executable).parent
# Secrets planted in the environment of every server and worker: they must never reach MLflow
# params/tags, Prefect logs/artifacts or a committed file.
_TOKEN = uuid.uuid4().hex[:12]
PLANTED = {
    "db_password": f"pgpw-{_TOKEN}",
    "aws_secret": f"awssecret-{_TOKEN}",
    "api_key": f"sk-planted-{_TOKEN}",
    "mlflow_password": f"mlpw-{_TOKEN}",
}
AWS_KEY_ID = "orchestra-test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TEST_CREDENTIAL_HOSTS = json.dumps({"OPENAI_API_KEY": ["api.openai.com"], "TAVILY_API_KEY": ["api.tavily.com"],
                            "VLLM_API_KEY": ["127.0.0.1", "localhost"],
                            "ORCHESTRA_TEST_EXPERT_KEY": ["127.0.0.1", "localhost"]})


def base_env(**extra: str) -> dict[str, str]:
    """This environment minus any ORCHESTRA_/PREFECT_/MLFLOW_ setting of the caller, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCHESTRA_", "PREFECT_", "MLFLOW_", "RAY_"))}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "DO_NOT_TRACK": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DVC_NO_ANALYTICS": "1", "GX_ANALYTICS_ENABLED": "false",
        "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1",
        # The test experts' key may go to the loopback servers (see core/secrets.py).
        "ORCHESTRA_CREDENTIAL_HOSTS": TEST_CREDENTIAL_HOSTS,
    })
    env.update(extra)
    return env


def make_cluster_workspace(root: Path, overrides: dict | None = None) -> Path:
    """A git + DVC workspace like the project (with the flows and prefect.yaml, so a Prefect
    worker can run the deployment from it), the toy profile's synthesis sizes, committed."""
    tiny = {"synthesize": yaml.safe_load(TINY_PROFILE.read_text())["synthesize"]}
    return make_project_workspace(root, {**tiny, **(overrides or {})}, folders=("flows", "tasks"),
                                  files=("prefect.yaml",))


@dataclass
class Service:
    """A server process in its own session; its output goes to `log`."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> Service:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_until(self, ready, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            with contextlib.suppress(Exception):
                if ready():
                    return
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{self.name} not ready within {timeout_s:g} s:\n{self.tail()}")

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.signal(signal.SIGKILL)  # whatever is left of the group (children that ignored SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


def http_ok(url: str, **kwargs) -> bool:
    import httpx

    return httpx.get(url, timeout=2.0, **kwargs).is_success


# ------------------------------------------------------------------------------ PostgreSQL


@dataclass
class Postgres:
    host: str
    port: int
    user: str
    created: list[str] = field(default_factory=list)

    def connect(self, dbname: str = "postgres"):
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname=dbname, connect_timeout=5)
        conn.autocommit = True
        return conn

    def create(self, prefix: str) -> str:
        from psycopg2 import sql

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        self.created.append(name)
        return name

    def url(self, dbname: str, driver: str) -> str:
        return f"postgresql+{driver}://{self.user}:{PLANTED['db_password']}@{self.host}:{self.port}/{dbname}"

    def query(self, dbname: str, statement: str, args: tuple = ()) -> list[tuple]:
        with contextlib.closing(self.connect(dbname)) as conn, conn.cursor() as cur:
            cur.execute(statement, args)
            return list(cur.fetchall())

    def drop_all(self) -> None:
        from psycopg2 import sql

        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            for name in self.created:
                cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    pytest.importorskip("psycopg2")
    import psycopg2

    pg = Postgres(os.environ.get("ORCHESTRA_TEST_PG_HOST", "127.0.0.1"),
                  int(os.environ.get("ORCHESTRA_TEST_PG_PORT", "5432")),
                  os.environ.get("ORCHESTRA_TEST_PG_USER", "postgres"))
    try:
        pg.connect().close()
    except psycopg2.OperationalError as exc:
        pytest.skip(f"PostgreSQL at {pg.host}:{pg.port} (user {pg.user}) is not reachable: {exc}")
    yield pg
    pg.drop_all()


# ------------------------------------------------------------------------------ the S3 server, moto


@dataclass
class S3:
    endpoint: str
    env: dict[str, str]
    mlflow_bucket: str = "orchestra-mlflow"
    dvc_bucket: str = "orchestra-dvc"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id=AWS_KEY_ID, aws_secret_access_key=PLANTED["aws_secret"])

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


@pytest.fixture(scope="session")
def s3() -> Iterator[S3]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    store = S3(f"http://127.0.0.1:{port}", {
        "AWS_ACCESS_KEY_ID": AWS_KEY_ID, "AWS_SECRET_ACCESS_KEY": PLANTED["aws_secret"],
        "AWS_DEFAULT_REGION": "us-east-1",
    })
    for bucket in (store.mlflow_bucket, store.dvc_bucket):
        store.client().create_bucket(Bucket=bucket)
    yield store
    server.stop()


# ------------------------------------------------------------------------------ MLflow server


@dataclass
class MlflowServer:
    url: str
    database: str
    service: Service

    @property
    def client_uri(self) -> str:
        """The tracking URI clients use, with planted basic-auth credentials (the server has no
        auth and ignores them; anything that logs the URI unredacted would leak them)."""
        return self.url.replace("http://", f"http://orchestra:{PLANTED['mlflow_password']}@")


@pytest.fixture(scope="session")
def mlflow_server(postgres: Postgres, s3: S3, tmp_path_factory) -> Iterator[MlflowServer]:
    home = tmp_path_factory.mktemp("mlflow-server")
    database = postgres.create("orchestra_mlflow")
    port = free_port()
    service = Service("mlflow server", [
        str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", postgres.url(database, "psycopg2"),
        "--artifacts-destination", f"s3://{s3.mlflow_bucket}/artifacts",
    ], base_env(**s3.env, MLFLOW_S3_ENDPOINT_URL=s3.endpoint), home, home / "server.log").start()
    url = f"http://127.0.0.1:{port}"
    try:
        service.wait_until(lambda: http_ok(f"{url}/health"), timeout_s=120)
        yield MlflowServer(url, database, service)
    finally:
        service.stop()


# ------------------------------------------------------------------------------ Prefect server


@dataclass
class PrefectServer:
    api_url: str
    database: str
    service: Service


@pytest.fixture(scope="session")
def prefect_server(postgres: Postgres, tmp_path_factory) -> Iterator[PrefectServer]:
    home = tmp_path_factory.mktemp("prefect-server")
    database = postgres.create("orchestra_prefect")
    port = free_port()
    service = Service("prefect server", [
        str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui",
    ], base_env(PREFECT_HOME=str(home), PREFECT_SERVER_DATABASE_CONNECTION_URL=postgres.url(database, "asyncpg"),
                PREFECT_SERVER_UI_ENABLED="false"), home, home / "server.log").start()
    api = f"http://127.0.0.1:{port}/api"
    try:
        service.wait_until(lambda: http_ok(f"{api}/health"), timeout_s=150)
        yield PrefectServer(api, database, service)
    finally:
        service.stop()


# ------------------------------------------------------------------------------ Ray head


@dataclass
class RayHead:
    address: str
    service: Service
    temp: Path

    def task_logs(self) -> list[str]:
        """What Ray's workers on this cluster wrote to their `.out` logs (task names among it)."""
        return [p.read_text(errors="replace") for p in (self.temp / "session_latest" / "logs").glob("worker-*.out")]


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory) -> Iterator[RayHead]:
    temp = Path(f"/tmp/ot-ray-{uuid.uuid4().hex[:6]}")  # Ray's socket paths must stay short
    port = free_port()
    ports = {flag: str(free_port()) for flag in (
        "--ray-client-server-port", "--node-manager-port", "--object-manager-port", "--metrics-export-port",
        "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")}
    cmd = [str(BIN / "ray"), "start", "--head", "--block", "--port", str(port), "--node-ip-address", "127.0.0.1",
           "--num-cpus", "2", "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(temp),
           *[x for pair in ports.items() for x in pair]]
    log = tmp_path_factory.mktemp("ray-head") / "ray-start.log"
    service = Service("ray head", cmd, base_env(RAY_AUTH_MODE="disabled"), REPO, log).start()
    address = f"127.0.0.1:{port}"
    try:
        service.wait_until(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None
                           and "Ray runtime started" in service.tail(20000), timeout_s=120)
        yield RayHead(address, service, temp)
    finally:
        service.stop(timeout_s=10)
        shutil.rmtree(temp, ignore_errors=True)


# ------------------------------------------------------------------------------ llama.cpp server


@dataclass
class LlamaServer:
    base_url: str
    model: str
    service: Service


def start_llama_server(folder: Path, alias: str = "smollm2", api_key: str | None = None) -> LlamaServer:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python[server] is not installed (make install builds it)")
    from toolorchestra.llm.smollm2 import gguf_path

    port = free_port()
    service = Service("llama.cpp server", [
        sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096", "--n_threads", "1", "--verbose", "false",
        *(["--api_key", api_key] if api_key else []),
    ], base_env(), folder, folder / f"llama-{port}.log").start()
    base_url = f"http://127.0.0.1:{port}/v1"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    service.wait_until(lambda: http_ok(f"{base_url}/models", headers=headers), timeout_s=90)
    return LlamaServer(base_url, alias, service)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory) -> Iterator[LlamaServer]:
    """Requires the planted API key (`Authorization: Bearer ...`): a request without it fails."""
    server = start_llama_server(tmp_path_factory.mktemp("llama"), api_key=PLANTED["api_key"])
    try:
        yield server
    finally:
        server.service.stop()
