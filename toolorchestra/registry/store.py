"""MLflow model-registry operations for the orchestrator: log and register, aliases, decisions,
download.

- `log_orchestrator(checkpoint, name=...)` logs the pyfunc model (`pyfunc.OrchestratorModel`, with
  the transformers weights and catalog as artifacts, the package code, pinned `pip_requirements`
  and a signature) **inside the active MLflow run** and registers it: the version's `run_id` is
  that run (the promote stage's, a child of the flow run), which is how `orchestra lineage
  models:/NAME@ALIAS` finds the data and code that made it;
- `alias_version` / `set_alias`: registry aliases (`champion`, `challenger`), never the deprecated
  stages;
- `record_decision` writes the gate's decision, its reasons and key metrics as version tags and
  the model card as the version's description;
- `download(ref)` fetches a registered version once into the state folder (by version number).

MLflow is imported inside the functions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.fs import atomic_write_text, staged_dir
from toolorchestra.core.settings import Settings

CHAMPION, CHALLENGER = "champion", "challenger"
ARTIFACT = "orchestrator"
MAX_DESCRIPTION = 5000  # the registry's column size on SQL stores (PostgreSQL enforces it)


def client_for(settings: Settings) -> Any:
    """An `MlflowClient` on the settings' tracking (and registry) URI."""
    import mlflow
    from mlflow import MlflowClient

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no progress bars in stage logs
    if settings.tracking_uri.startswith("sqlite:///"):
        Path(settings.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(settings.tracking_uri)
    return MlflowClient(tracking_uri=settings.tracking_uri)


def _not_found(exc: Exception) -> bool:
    code = getattr(exc, "error_code", "") or ""
    return "RESOURCE_DOES_NOT_EXIST" in code or "INVALID_PARAMETER_VALUE" in code or "not found" in str(exc).lower()


def alias_version(client: Any, name: str, alias: str) -> Any | None:
    """The version holding `alias`, None when the model or alias does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, alias)
    except MlflowException as exc:
        if _not_found(exc):
            return None
        raise


def parse_ref(ref: str) -> tuple[str, str | None, str | None]:
    """`models:/NAME@ALIAS` -> (NAME, ALIAS, None); `models:/NAME/VERSION` -> (NAME, None, VERSION).

    >>> parse_ref("models:/orchestrator@champion")
    ('orchestrator', 'champion', None)
    >>> parse_ref("models:/orchestrator/3")
    ('orchestrator', None, '3')
    """
    if not ref.startswith("models:/"):
        raise OrchestraError(f"{ref!r} is not a registry reference: use models:/NAME@ALIAS or models:/NAME/VERSION")
    body = ref.removeprefix("models:/").strip("/")
    if "@" in body:
        name, alias = body.split("@", 1)
        if name and alias:
            return name, alias, None
    elif "/" in body:
        name, version = body.rsplit("/", 1)
        if name and version.isdigit():
            return name, None, version
    raise OrchestraError(f"{ref!r}: use models:/NAME@ALIAS or models:/NAME/VERSION")


def resolve_version(client: Any, ref: str) -> Any:
    from mlflow.exceptions import MlflowException

    name, alias, number = parse_ref(ref)
    try:
        return client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, number)
    except MlflowException as exc:
        raise OrchestraError(f"cannot resolve {ref!r} in the model registry: {exc.message}") from None


def _package_code(work: Path) -> Path:
    """A copy of the `toolorchestra` package (without caches) that travels with the model."""
    import toolorchestra

    source = Path(next(iter(toolorchestra.__path__)))
    target = work / "code" / "toolorchestra"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return target


def log_orchestrator(checkpoint: str | Path, *, name: str, settings: Settings, work: str | Path | None = None,
                     tags: dict[str, str] | None = None) -> Any:
    """Log the checkpoint as a pyfunc model in the active run and register it as a new version of
    `name`; returns the `ModelVersion`."""
    import mlflow

    from toolorchestra.registry.bundle import pip_requirements, prepare_bundle
    from toolorchestra.registry.pyfunc import OrchestratorModel, signature

    run = mlflow.active_run()
    if run is None:
        raise OrchestraError("log_orchestrator must run inside an MLflow run (the promote stage's)")
    client = client_for(settings)
    own = work is None
    if own:
        settings.state.mkdir(parents=True, exist_ok=True)  # beside the artifact store, not in a small /tmp
    folder = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix=".bundle-", dir=settings.state))
    try:
        artifacts = prepare_bundle(checkpoint, folder)
        code = _package_code(folder)
        info = mlflow.pyfunc.log_model(
            name=ARTIFACT, python_model=OrchestratorModel(), artifacts=artifacts, code_paths=[str(code)],
            pip_requirements=pip_requirements(), signature=signature(), registered_model_name=name,
        )
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
    version = client.get_model_version(name, str(info.registered_model_version))
    for key, value in (tags or {}).items():
        client.set_model_version_tag(name, version.version, key, str(value))
    return version


def set_alias(client: Any, name: str, alias: str, version: str | int) -> None:
    client.set_registered_model_alias(name, alias, str(version))


def record_decision(client: Any, name: str, version: str | int, *, tags: dict[str, Any], card: str) -> None:
    """Decision, reasons and metrics as tags; the model card as the description (cut to the
    registry's size, the full card being a run artifact)."""
    for key, value in tags.items():
        client.set_model_version_tag(name, str(version), key, str(value)[:4000])
    if len(card) > MAX_DESCRIPTION:
        note = "\n\n... (cut; the full card is the run artifact model_card.md)"
        card = card[: MAX_DESCRIPTION - len(note)] + note
    client.update_model_version(name, str(version), description=card)


def download(ref: str, settings: Settings) -> tuple[Path, Any]:
    """(local folder of the model, its `ModelVersion`); each version is downloaded once into
    `<state>/registry/<name>/<version>/`."""
    import mlflow

    client = client_for(settings)
    version = resolve_version(client, ref)
    target = settings.state / "registry" / version.name / str(version.version)
    if (target / ".complete").is_file():
        return target, version
    with staged_dir(target) as tmp:
        mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{version.name}/{version.version}", dst_path=str(tmp))
        atomic_write_text(tmp / ".complete", f"{ref}\n")
    return target, version


def artifact_paths(model_dir: Path) -> dict[str, Path]:
    """The pyfunc's artifact folders inside a downloaded model."""
    from mlflow.models import Model

    conf = Model.load(str(model_dir)).flavors.get("python_function", {})
    artifacts = conf.get("artifacts") or {}
    if not artifacts:
        raise OrchestraError(f"{model_dir} is not an orchestrator model (its pyfunc has no artifacts)")
    return {key: model_dir / value["path"] for key, value in artifacts.items()}

