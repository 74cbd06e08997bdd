"""`orchestra run`, `orchestra deploy`: the retraining flow on this workspace, and its deployments."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

import typer

from orchestra_cli.app import app


def prefect_environment(settings) -> None:
    """Prefect reads its settings at import: set them first. Embedded: the ephemeral API with its
    home (database, logs) inside the workspace's state folder."""
    os.environ.setdefault("PREFECT_HOME", str(settings.prefect_home))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    if settings.prefect_api_url:
        os.environ["PREFECT_API_URL"] = settings.prefect_api_url
    settings.prefect_home.mkdir(parents=True, exist_ok=True)
    # The ephemeral server migrates its database at every start (~2 s on two cores); once a run
    # with this Prefect version has migrated it, later starts skip that.
    if migrated_marker(settings).exists():
        os.environ.setdefault("PREFECT_SERVER_DATABASE_MIGRATE_ON_START", "false")


def migrated_marker(settings) -> Path:
    from importlib.metadata import version

    return settings.prefect_home / f".migrated-{version('prefect')}"


def workspace_lock(settings, wait_s: float):
    from filelock import FileLock

    settings.state.mkdir(parents=True, exist_ok=True)
    return FileLock(str(settings.state / "run.lock"), timeout=wait_s)


@app.command()
def run(
    params: Annotated[Path | None, typer.Option(help="use this parameters file (copied over params.yaml)")] = None,
    force: Annotated[list[str] | None, typer.Option(help="re-run this stage even if up to date (repeatable)")] = None,
    flow_name: Annotated[str, typer.Option("--flow", help="retrain | evaluate | promote")] = "retrain",
    until: Annotated[list[str] | None, typer.Option(help="stop after this stage (repeatable; retrain only)")] = None,
    wait: Annotated[float, typer.Option(help="seconds to wait for another run on this workspace")] = 0.0,
    push: Annotated[bool, typer.Option(help="dvc push the outputs at the end")] = True,
) -> None:
    """Run the retraining flow (every out-of-date stage) on this workspace."""
    from filelock import Timeout

    from orchestra_cli.lifeline import forward_stop, start_watchdog
    from toolorchestra.core.errors import ConfigError, OrchestraError
    from toolorchestra.core.fs import atomic_write_text
    from toolorchestra.core.settings import load_settings
    from toolorchestra.core.stopping import stop_on_signals

    settings = load_settings()
    root = settings.workspace
    if not (root / "dvc.yaml").exists() or not (root / ".dvc").is_dir():
        raise OrchestraError(f"{root} is not a pipeline workspace (needs dvc.yaml and `dvc init`)")
    # No process outlives the run: SIGTERM stops the stage first, a watchdog covers SIGKILL.
    watchdog = start_watchdog(settings.tracking_uri)
    stop_on_signals(before=lambda signum: forward_stop(signum, exclude={watchdog.pid}))
    prefect_environment(settings)
    lock = workspace_lock(settings, wait)
    try:
        lock.acquire()
    except Timeout:
        raise OrchestraError(
            f"another `orchestra run` is using this workspace (lock {lock.lock_file}); "
            "wait for it to finish or pass --wait SECONDS"
        ) from None
    try:
        from stagekit.graph import stage_order
        from stagekit.runner import check_all_params

        # Broken parameters are reported before anything runs (and before params.yaml changes).
        order = stage_order(root)
        check_all_params(params.resolve() if params else root / "params.yaml", order, settings)
        for option, names in (("--force", force), ("--until", until)):
            unknown = sorted(set(names or []) - set(order))
            if unknown:
                raise ConfigError(None, f"no stage {', '.join(unknown)} in dvc.yaml; stages: {', '.join(order)}",
                                  key=option)
        if params is not None:
            atomic_write_text(root / "params.yaml", params.read_text())
        if not settings.prefect_api_url and not os.environ.get("PREFECT_API_URL"):
            from orchestra_cli.lifeline import start_detached_prefect_server

            start_detached_prefect_server()
        from flows import retrain as flows

        chosen = {"retrain": flows.retrain, "evaluate": flows.evaluate, "promote": flows.promote}.get(flow_name)
        if chosen is None:
            raise OrchestraError(f"unknown flow {flow_name!r}; choose retrain, evaluate or promote")
        extra = {"until": list(until)} if until else {}
        if extra and flow_name != "retrain":
            raise OrchestraError("--until applies to the retrain flow only")
        outcomes = chosen(workspace=str(root), force=list(force or []), push_outputs=push, **extra)
        if not settings.prefect_api_url:
            migrated_marker(settings).touch()
    finally:
        lock.release()
    width = max((len(o.stage) for o in outcomes), default=5)
    for o in outcomes:
        state = f"ran {o.seconds:6.1f}s" if o.ran else "up to date"
        typer.echo(f"{o.stage:<{width}}  {state}")


@app.command()
def deploy(
    prefect_yaml: Annotated[Path, typer.Option(help="deployment definitions")] = Path("prefect.yaml"),
) -> None:
    """Register the deployments in prefect.yaml (retrain weekly, evaluate) with a Prefect server."""
    import subprocess
    import sys

    from toolorchestra.core.errors import OrchestraError
    from toolorchestra.core.settings import load_settings

    settings = load_settings()
    if not settings.prefect_api_url and not os.environ.get("PREFECT_API_URL"):
        raise OrchestraError("no Prefect server configured: set ORCHESTRA_PREFECT_API_URL (or PREFECT_API_URL)")
    prefect_environment(settings)
    prefect = shutil.which("prefect", path=str(Path(sys.executable).parent)) or "prefect"
    proc = subprocess.run([prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_yaml)],
                          cwd=settings.workspace)
    raise typer.Exit(proc.returncode)


@app.command()
def serve(
    cron: Annotated[str, typer.Option(help="schedule of the retrain deployment")] = "0 3 * * 1",
) -> None:
    """Serve `retrain` on a weekly schedule from this machine (no worker or work pool needed)."""
    from toolorchestra.core.settings import load_settings

    settings = load_settings()
    prefect_environment(settings)
    from flows.retrain import retrain

    retrain.serve(name="retrain-weekly", cron=cron, parameters={"workspace": str(settings.workspace)})
