"""`orchestra doctor`: is every service of the active profile reachable? If not, how to fix it.

Checks, from the same settings the flows use (`ORCHESTRA_*`, `ORCHESTRA_SETTINGS_FILE`):
MLflow tracking (server `/health`, or the local store), MLflow artifact root (the S3 bucket), the
Prefect API (`/health`), the S3 endpoint, the workspace's default DVC remote (from `.dvc/config`
and `.dvc/config.local`, with their credentials), the Ray cluster, and every model of the tool
catalog served behind an OpenAI-compatible endpoint (`GET /models` with its key). Probes run
concurrently, each bounded by `--timeout`, and print no secret (URLs are shown redacted). Exit
code 2 (with a one-line summary) when something the profile needs is unreachable or misconfigured.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestra_cli.app import app

COMPOSE = "docker compose -f infra/compose.yaml up -d"


@dataclass
class Check:
    service: str
    target: str
    status: str
    """reachable | unreachable | misconfigured | not configured"""
    detail: str
    fix: str = ""

    @property
    def failed(self) -> bool:
        return self.status in ("unreachable", "misconfigured")


def _probe(service: str, target: str, probe: Callable[[], Any], fix: str) -> Callable[[], Check]:
    def run() -> Check:
        try:
            found = probe()
        except Exception as exc:  # a probe bug must not hide the other checks
            return Check(service, target, "unreachable", f"{type(exc).__name__}: {exc}", fix)
        return Check(service, target, "reachable" if found.ok else "unreachable", found.detail,
                     "" if found.ok else fix)
    return run


def _fixed(check: Check) -> Callable[[], Check]:
    return lambda: check


def _mlflow_checks(settings, timeout: float) -> list[Callable[[], Check]]:
    from toolorchestra.core.services import mlflow_reachability, redact_url, s3_reachability

    uri = settings.tracking_uri
    if uri.startswith(("http://", "https://")):
        fix = f"start the tracking server ({COMPOSE} mlflow) or correct ORCHESTRA_MLFLOW__TRACKING_URI"
    elif "://" in uri and not uri.startswith(("sqlite:", "file:")):
        fix = "start the database or correct ORCHESTRA_MLFLOW__TRACKING_URI (a team should use the MLflow server)"
    else:
        fix = "make the state folder writable or set ORCHESTRA_STATE_DIR"
    checks = [_probe("mlflow tracking", redact_url(uri), lambda: mlflow_reachability(uri, timeout), fix)]
    root = settings.mlflow.artifact_root
    if root and root.startswith("s3://"):
        endpoint = settings.mlflow.s3_endpoint_url or settings.s3_endpoint_url or os.environ.get("MLFLOW_S3_ENDPOINT_URL")
        checks.append(_probe(
            "mlflow artifacts", root, lambda: s3_reachability(root, endpoint_url=endpoint, timeout_s=timeout),
            "create the bucket, give this machine AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or a role), "
            "and set ORCHESTRA_MLFLOW__S3_ENDPOINT_URL for an S3-compatible store",
        ))
    elif root is None and uri.startswith(("http://", "https://")):
        from toolorchestra.core.services import mlflow_artifacts_reachability

        checks.append(_probe(
            "mlflow artifacts", "the tracking server's artifact store",
            lambda: mlflow_artifacts_reachability(uri, timeout),
            "start the server with --artifacts-destination s3://BUCKET/PREFIX (and S3 credentials), or set "
            "ORCHESTRA_MLFLOW__ARTIFACT_ROOT=s3://BUCKET/PREFIX for clients writing to S3 themselves",
        ))
    elif root is None and settings.profile == "cluster":
        checks.append(_fixed(Check(
            "mlflow artifacts", settings.artifact_root, "misconfigured",
            "no artifact root set: every worker would keep artifacts in its own local folder",
            "set ORCHESTRA_MLFLOW__ARTIFACT_ROOT=s3://BUCKET/PREFIX (the MLflow server's bucket)",
        )))
    return checks


def _prefect_check(settings, timeout: float) -> Callable[[], Check]:
    from toolorchestra.core.services import prefect_reachability, redact_url

    url = settings.prefect_api_url or os.environ.get("PREFECT_API_URL")
    if not url:
        status = "misconfigured" if settings.profile == "cluster" else "not configured"
        return _fixed(Check("prefect api", "-", status, "Prefect's ephemeral API (runs in this process)",
                            "set ORCHESTRA_PREFECT_API_URL=http://HOST:4200/api" if status != "not configured" else ""))
    return _probe("prefect api", redact_url(url), lambda: prefect_reachability(url, timeout),
                  f"start the server ({COMPOSE} prefect-server) or correct ORCHESTRA_PREFECT_API_URL (it ends in /api)")


def _s3_endpoint_check(settings, timeout: float) -> Callable[[], Check] | None:
    from toolorchestra.core.services import host_port, redact_url, tcp_reachability

    endpoint = settings.s3_endpoint_url or settings.mlflow.s3_endpoint_url
    if not endpoint:
        return None
    default = 443 if endpoint.startswith("https") else 80
    return _probe("s3 endpoint", redact_url(endpoint), lambda: tcp_reachability(*host_port(endpoint, default), timeout),
                  f"start the S3-compatible store ({COMPOSE} minio) or correct ORCHESTRA_S3_ENDPOINT_URL")


def _dvc_check(settings, timeout: float) -> Callable[[], Check] | None:
    from toolorchestra.core.services import local_folder_reachability, redact_url, s3_reachability

    if not (settings.workspace / ".dvc").is_dir():
        return None
    try:
        from dvc.repo import Repo

        with Repo(str(settings.workspace)) as repo:
            config = repo.config
            name = config["core"].get("remote")
            remote = dict(config["remote"].get(name, {})) if name else {}
    except Exception as exc:
        return _fixed(Check("dvc remote", "-", "misconfigured", f"cannot read the DVC config: {exc}",
                            "fix .dvc/config (`dvc config --list` shows what DVC reads)"))
    if not name or "url" not in remote:
        return _fixed(Check("dvc remote", "-", "misconfigured", "no default DVC remote",
                            "dvc remote add -d storage s3://BUCKET/PREFIX"))
    url = str(remote["url"])
    target = f"{name}: {redact_url(url)}"
    wanted = settings.dvc.remote_url
    if wanted and wanted.rstrip("/") != url.rstrip("/"):
        return _fixed(Check("dvc remote", target, "misconfigured",
                            f"ORCHESTRA_DVC__REMOTE_URL is {redact_url(wanted)} but DVC pushes to {redact_url(url)}",
                            f"dvc remote add -f -d {name} {wanted} (or correct ORCHESTRA_DVC__REMOTE_URL)"))
    if url.startswith("s3://"):
        endpoint = remote.get("endpointurl") or settings.s3_endpoint_url
        return _probe("dvc remote", target, lambda: s3_reachability(
            url, endpoint_url=endpoint, access_key_id=remote.get("access_key_id"),
            secret_access_key=remote.get("secret_access_key"), region=remote.get("region"), timeout_s=timeout),
            f"create the bucket; put credentials in .dvc/config.local (`dvc remote modify --local {name} "
            f"access_key_id ...`) or the environment; `dvc remote modify {name} endpointurl URL` for S3-compatible stores")
    if "://" not in url:
        return _probe("dvc remote", target, lambda: local_folder_reachability(Path(url)),
                      "make the remote folder writable or point the remote elsewhere (`dvc remote modify`)")
    return _fixed(Check("dvc remote", target, "reachable",
                        f"{url.split('://')[0]} remote: not probed (dvc push will tell)"))


def _ray_check(settings, timeout: float) -> Callable[[], Check]:
    from toolorchestra.core.fanout import resolve_address
    from toolorchestra.core.services import ray_reachability

    address = resolve_address(settings.ray_address)
    if address is None:
        return _fixed(Check("ray", "-", "not configured", "stages fan out serially in their own process",
                            "set ORCHESTRA_RAY_ADDRESS=HEAD:6379 (or RAY_ADDRESS) to use a Ray cluster"))
    return _probe("ray", address, lambda: ray_reachability(address, timeout),
                  f"start the head (`ray start --head` or {COMPOSE} ray-head) or correct ORCHESTRA_RAY_ADDRESS / RAY_ADDRESS")


def _catalog_path(settings, catalog: Path | None) -> Path:
    if catalog is not None:
        return catalog
    import yaml

    params = settings.workspace / "params.yaml"
    try:
        configured = ((yaml.safe_load(params.read_text()) or {}).get("describe") or {}).get("deps", {}).get("catalog")
    except (OSError, yaml.YAMLError, AttributeError):
        configured = None
    if configured and (settings.workspace / configured).is_file():
        return settings.workspace / configured
    from toolorchestra.tools.catalog import embedded_catalog_path

    return embedded_catalog_path()


def _expert_checks(settings, catalog: Path | None, timeout: float) -> list[Callable[[], Check]]:
    from toolorchestra.core.services import host_port, openai_reachability, redact_url, tcp_reachability
    from toolorchestra.core.settings import secret
    from toolorchestra.llm.config import OpenAILLMConfig
    from toolorchestra.tools.catalog import WebSearchBackend, load_catalog

    path = _catalog_path(settings, catalog)
    cat = load_catalog(path)
    checks = []
    for alias, entry in sorted(cat.models.items()):
        backend = entry.backend
        if not isinstance(backend, OpenAILLMConfig):
            continue
        base_url = backend.base_url or "https://api.openai.com/v1"
        key = secret(backend.api_key_env)
        fix = (f"start the server (`vllm serve {backend.model} --enable-auto-tool-choice --tool-call-parser hermes`) "
               f"or correct models.{alias}.backend.base_url in {path}")
        if backend.api_key_env and key is None:
            fix += f"; set {backend.api_key_env} if the server needs a key"

        def probe(base_url=base_url, key=key, model=backend.model):
            return openai_reachability(base_url, key, model, timeout)

        checks.append(_probe(f"expert {alias}", redact_url(base_url), probe, fix))
    for tool in cat.tools:
        if isinstance(tool.backend, WebSearchBackend):
            url = tool.backend.base_url
            if secret(tool.backend.api_key_env) is None:  # the tool answers with an error observation
                checks.append(_fixed(Check(f"tool {tool.name}", redact_url(url), "not configured",
                                           f"{tool.backend.api_key_env} is not set: the tool reports an error when called",
                                           f"set {tool.backend.api_key_env} to enable it")))
                continue
            checks.append(_probe(f"tool {tool.name}", redact_url(url),
                                 lambda url=url: tcp_reachability(*host_port(url, 443), timeout),
                                 f"allow outbound HTTPS to {redact_url(url)} or drop the tool from {path}"))
    return checks


def run_checks(settings, catalog: Path | None = None, timeout: float = 5.0) -> list[Check]:
    """Every check of the active profile, run concurrently; in a stable order."""
    planned: list[Callable[[], Check]] = [*_mlflow_checks(settings, timeout), _prefect_check(settings, timeout)]
    planned += [c for c in (_s3_endpoint_check(settings, timeout), _dvc_check(settings, timeout)) if c is not None]
    planned.append(_ray_check(settings, timeout))
    try:
        planned += _expert_checks(settings, catalog, timeout)
    except Exception as exc:  # a broken catalog is itself a finding
        planned.append(_fixed(Check("catalog", str(catalog or "-"), "misconfigured", str(exc),
                                    "fix the catalog file (`orchestra ask --catalog FILE` validates it too)")))
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda check: check(), planned))


@app.command()
def doctor(
    catalog: Annotated[Path | None, typer.Option(help="tool catalog whose experts to check (default: params.yaml's describe catalog)")] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds per probe")] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON list of checks")] = False,
) -> None:
    """Check that every configured service (MLflow, Prefect, S3, DVC remote, Ray, experts) is reachable."""
    from toolorchestra.core.errors import OrchestraError
    from toolorchestra.core.settings import load_settings

    settings = load_settings()
    checks = run_checks(settings, catalog, timeout)
    if as_json:
        typer.echo(json.dumps([{**asdict(c), "failed": c.failed} for c in checks], indent=2))
    else:
        source = os.environ.get("ORCHESTRA_SETTINGS_FILE") or "the environment"
        typer.echo(f"profile {settings.profile} (settings from {source}), workspace {settings.workspace}")
        width = max(len(c.service) for c in checks)
        mark = {"reachable": "ok ", "unreachable": "!! ", "misconfigured": "!! ", "not configured": "-- "}
        for c in checks:
            typer.echo(f"{mark[c.status]}{c.service:<{width}}  {c.status}: {c.target}")
            typer.echo(f"{'':3}{'':<{width}}  {c.detail}")
            if c.fix:
                typer.echo(f"{'':3}{'':<{width}}  fix: {c.fix}")
    failed = [c for c in checks if c.failed]
    if failed:
        raise OrchestraError(f"{len(failed)} of {len(checks)} check(s) failed: {', '.join(c.service for c in failed)}")
