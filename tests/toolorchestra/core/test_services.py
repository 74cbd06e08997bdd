"""Reachability probes against real local servers (a stdlib HTTP server, closed ports)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolorchestra.core import services as sv

SECRET_KEY = "sk-test-not-to-be-printed"


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, object]] = {}
    seen_auth: list[str] = []

    def do_GET(self):
        self.seen_auth.append(self.headers.get("Authorization", ""))
        status, body = self.routes.get(self.path, (404, {"error": "not found"}))
        if self.path == "/v1/models" and self.headers.get("Authorization") != f"Bearer {SECRET_KEY}":
            status, body = 401, {"error": "bad key " + self.headers.get("Authorization", "")}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def http_server():
    _Handler.routes = {
        "/health": (200, "OK"),
        "/api/health": (200, True),
        "/v1/models": (200, {"object": "list", "data": [{"id": "served-model"}]}),
    }
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_redact_url_and_host_port():
    assert sv.redact_url("postgresql://orch:s3cret@db:5432/mlflow") == "postgresql://orch:***@db:5432/mlflow"
    assert sv.redact_url("http://mlflow:5000") == "http://mlflow:5000"
    assert sv.host_port("ray-head:6379", 1) == ("ray-head", 6379)
    assert sv.host_port("ray://head", 10001) == ("head", 10001)
    assert sv.host_port("https://minio.example", 443) == ("minio.example", 443)


def test_http_probes_on_a_live_server(http_server):
    assert sv.mlflow_reachability(http_server).ok
    assert sv.prefect_reachability(f"{http_server}/api").ok
    # the MLflow health answer is not Prefect's: a URL without /api is caught
    found = sv.prefect_reachability(http_server)
    assert not found.ok and "/api" in found.detail
    found = sv.openai_reachability(f"{http_server}/v1", SECRET_KEY, "served-model")
    assert found.ok and "served-model" in found.detail
    wrong = sv.openai_reachability(f"{http_server}/v1", SECRET_KEY, "other-model")
    assert not wrong.ok and "served-model" in wrong.detail
    rejected = sv.openai_reachability(f"{http_server}/v1", "wrong-key")
    assert not rejected.ok and "401" in rejected.detail and "credentials" in rejected.detail
    assert f"Bearer {SECRET_KEY}" in _Handler.seen_auth  # the key was sent ...
    for found in (found, wrong, rejected):
        assert SECRET_KEY not in found.detail and "wrong-key" not in found.detail  # ... never echoed


def test_closed_ports_are_unreachable_quickly():
    port = _closed_port()
    for found in (sv.mlflow_reachability(f"http://127.0.0.1:{port}", timeout_s=2),
                  sv.prefect_reachability(f"http://127.0.0.1:{port}/api", timeout_s=2),
                  sv.ray_reachability(f"127.0.0.1:{port}", timeout_s=2),
                  sv.ray_reachability(f"ray://127.0.0.1:{port}", timeout_s=2),
                  sv.mlflow_reachability(f"postgresql://u:pw@127.0.0.1:{port}/db", timeout_s=2)):
        assert not found.ok, found
        assert "pw" not in found.detail
    assert sv.ray_reachability("auto").ok and sv.ray_reachability("local").ok


def test_local_stores(tmp_path):
    assert sv.mlflow_reachability(f"sqlite:///{tmp_path}/new/folder/mlflow.db").ok
    blocked = tmp_path / "file"
    blocked.write_text("x")
    found = sv.mlflow_reachability(f"sqlite:///{blocked}/sub/mlflow.db")
    assert not found.ok and "not a writable folder" in found.detail
    assert not sv.s3_reachability("https://not-s3/bucket").ok
