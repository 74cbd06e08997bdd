"""Reachability probes for the services of the cluster profile (what `orchestra doctor` runs).

Each probe answers within its timeout with a `Reachability(ok, detail)` and never raises for a
service that is down, misconfigured or refusing credentials: the detail says which. Probes are
read-only (health endpoints, `HEAD` of a bucket, a TCP connect) and print no secret: URLs are
shown with their password replaced (`redact_url`), keys are sent but never echoed.

boto3 is imported inside the S3 probe only.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Reachability:
    ok: bool
    detail: str


def redact_url(url: str) -> str:
    """`scheme://user:***@host/...`: a URL safe to print (passwords in URLs are common for DBs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username or ''}:***@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def host_port(address: str, default_port: int) -> tuple[str, int]:
    """`host:port` (or a URL) as a pair; the port defaults to `default_port`."""
    parts = urlsplit(address if "://" in address else f"//{address}")
    return parts.hostname or "127.0.0.1", parts.port or default_port


def tcp_reachability(host: str, port: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return Reachability(True, f"TCP {host}:{port} accepts connections")
    except OSError as exc:
        return Reachability(False, f"TCP {host}:{port}: {exc.strerror or type(exc).__name__}")


def http_reachability(url: str, *, headers: dict[str, str] | None = None,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[Reachability, object | None]:
    """GET `url`; ok on a 2xx answer. Returns the probe and the decoded JSON body (or None)."""
    import httpx

    shown = redact_url(url)
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=True)
    except httpx.TimeoutException:
        return Reachability(False, f"GET {shown}: no answer within {timeout_s:g} s"), None
    except httpx.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        return Reachability(False, f"GET {shown}: {reason}"), None
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success:
        return Reachability(True, f"GET {shown}: HTTP {response.status_code}"), body
    hint = {401: " (credentials missing or rejected)", 403: " (credentials rejected)",
            404: " (wrong path: check the URL's prefix)"}.get(response.status_code, "")
    return Reachability(False, f"GET {shown}: HTTP {response.status_code}{hint}"), body


def mlflow_reachability(tracking_uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """A tracking server (`http(s)://`: its `/health`), a database URI (TCP to its host), or a
    local store (`sqlite:///`, `file:`, a path: its folder must be creatable)."""
    scheme = urlsplit(tracking_uri).scheme
    if scheme in ("http", "https"):
        found, _ = http_reachability(tracking_uri.rstrip("/") + "/health", timeout_s=timeout_s)
        return found
    if scheme.startswith(("postgresql", "mysql", "mssql")):
        host, port = host_port(tracking_uri, {"postgresql": 5432, "mysql": 3306}.get(scheme.split("+")[0], 1433))
        return tcp_reachability(host, port, timeout_s)
    path = Path(tracking_uri.removeprefix("sqlite:///").removeprefix("file://").removeprefix("file:"))
    return local_folder_reachability(path.parent if scheme == "sqlite" else path)


def mlflow_artifacts_reachability(tracking_uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """A tracking server that proxies artifacts (`mlflow server --artifacts-destination s3://...`):
    listing the root of its artifact store makes the server reach its bucket."""
    url = tracking_uri.rstrip("/") + "/api/2.0/mlflow-artifacts/artifacts"
    found, _ = http_reachability(url, timeout_s=timeout_s)
    if found.ok:
        return Reachability(True, f"{found.detail}: the server serves artifacts from its store")
    if "HTTP 404" in found.detail:
        return Reachability(False, f"{found.detail}: the server does not serve artifacts (--no-serve-artifacts)")
    if "HTTP 5" in found.detail:
        return Reachability(False, f"{found.detail}: the server cannot reach its artifact store")
    return found


def prefect_reachability(api_url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    found, body = http_reachability(api_url.rstrip("/") + "/health", timeout_s=timeout_s)
    if found.ok and body is not True:
        return Reachability(False, f"{found.detail}, but the answer is not a Prefect API health check "
                                   "(the URL must end in /api)")
    return found


def openai_reachability(base_url: str, api_key: str | None, model: str | None = None,
                        timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """An OpenAI-compatible endpoint: `GET {base_url}/models` with the key; `model` must be listed
    when the server lists any."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    found, body = http_reachability(base_url.rstrip("/") + "/models", headers=headers, timeout_s=timeout_s)
    if not found.ok:
        return found
    served = [m.get("id") for m in (body or {}).get("data", []) if isinstance(m, dict)] if isinstance(body, dict) else []
    if model and served and model not in served:
        return Reachability(False, f"{found.detail}, but it serves {served}, not {model!r}")
    return Reachability(True, f"{found.detail}; serves {', '.join(map(str, served)) or 'models'}")


def s3_reachability(url: str, *, endpoint_url: str | None = None, access_key_id: str | None = None,
                    secret_access_key: str | None = None, region: str | None = None,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """`HEAD` the bucket of `s3://bucket/prefix` (on `endpoint_url` for S3-compatible stores).
    Credentials not given come from boto3's usual chain (environment, profile, instance role)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        return Reachability(False, f"{url!r} is not an s3://bucket/prefix URL")
    bucket = parts.netloc
    where = f"s3://{bucket}" + (f" at {redact_url(endpoint_url)}" if endpoint_url else "")
    client = boto3.client(
        "s3", endpoint_url=endpoint_url, aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key,
        region_name=region or "us-east-1",
        config=Config(connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 1}),
    )
    try:
        client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        return Reachability(False, f"{where}: no credentials (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", "?"))
        reason = {"404": "the bucket does not exist", "NoSuchBucket": "the bucket does not exist",
                  "403": "access denied (credentials rejected or no permission)"}.get(code, f"error {code}")
        return Reachability(False, f"{where}: {reason}")
    except BotoCoreError as exc:
        return Reachability(False, f"{where}: {type(exc).__name__}: {exc}")
    return Reachability(True, f"{where}: bucket exists and is readable")


def ray_reachability(address: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """`host:port` of a head (its GCS), `ray://host:port` (Ray Client), `http://host:8265` (the
    job API), or `auto` / `local` (nothing to probe from here)."""
    if address in ("auto", "local"):
        return Reachability(True, f"{address!r}: resolved by ray.init on the machine that runs the stage")
    if address.startswith(("http://", "https://")):
        found, _ = http_reachability(address.rstrip("/") + "/api/version", timeout_s=timeout_s)
        return found
    host, port = host_port(address, 10001 if address.startswith("ray://") else 6379)
    return tcp_reachability(host, port, timeout_s)


def local_folder_reachability(path: Path) -> Reachability:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and os.access(existing, os.W_OK):
        return Reachability(True, f"local store under {path}")
    return Reachability(False, f"cannot create {path}: {existing} is not a writable folder")
