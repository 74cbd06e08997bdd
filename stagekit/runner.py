"""Run one stage: validate its parameters, stage its outputs, move them into place, log to MLflow.

`run_stage("synthesize")` is what `orchestra stage synthesize` (and so dvc.yaml) calls:
1. read `params.yaml`; the stage's section (plus the `base:` keys its model declares) is
   validated by `pipelines/<name>.py:Params`, every problem reported with file, key and reason;
2. each output gets a staging path beside its final place (same filesystem, so the final
   rename is atomic); a path with a suffix is a file, one without a folder (created empty);
3. `run(params, paths)` runs inside an MLflow run tagged with the git commit and dvc.lock hashes;
4. on success every staged output replaces its final path and metrics are logged; on failure the
   staging paths are removed and nothing at the final paths changes.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import ValidationError

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.core.fs import atomic_write_json, replace_path
from toolorchestra.core.paths import check_replaceable, check_stage_paths, record_outputs, resolve_user_path
from toolorchestra.core.settings import Settings, load_settings
from toolorchestra.core.stopping import stops_prevail
from toolorchestra.core.yaml_strict import strict_load

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def load_params_file(path: Path) -> dict[str, Any]:
    try:
        data = strict_load(path.read_text(encoding="utf-8"))  # a key written twice is an error
    except OSError as exc:
        raise ConfigError(path, f"cannot read parameters: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(path, f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(path, "must be a mapping of stage sections")
    return data


def stage_output(workspace: Path, stage: str, key: str, default: str, params_file: str = "params.yaml") -> Path:
    """Where `stage` writes its output `key` (`outs.<key>` of its params.yaml section, else `default`)."""
    section = load_params_file(workspace / params_file).get(stage) or {}
    return workspace / ((section.get("outs") or {}).get(key) or default)


def stage_module(name: str) -> ModuleType:
    if not _NAME.match(name):
        raise ConfigError(None, f"{name!r} is not a stage name", key="stage")
    try:
        module = importlib.import_module(f"pipelines.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"pipelines.{name}":
            raise ConfigError(None, f"no stage {name!r}: expected a module pipelines/{name}.py", key="stage") from None
        raise
    if not hasattr(module, "run") or not hasattr(module, "Params"):
        raise ConfigError(None, f"pipelines/{name}.py must define Params and run(params, paths)", key="stage")
    return module


def validate_params(name: str, module: ModuleType, all_params: dict[str, Any], source: Path) -> StageParams:
    section = all_params.get(name)
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(source, "must be a mapping", key=name)
    model: type[StageParams] = module.Params
    base = all_params.get("base") or {}
    merged = {k: v for k, v in base.items() if k in model.model_fields and k not in section}
    merged.update(section)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ConfigError(source, problems) from None


def _checked_paths(params: StageParams, workspace: Path, stage: str, settings: Settings,
                   source: Path | None) -> tuple[dict[str, Path], dict[str, Path]]:
    """(deps, final outs), resolved; nothing outside the workspace (or a read-only root, for
    inputs) is touched (see core/paths.py), and every input exists."""
    deps, finals = check_stage_paths(stage, params.deps, params.outs, workspace, state=settings.state,
                                     read_only_roots=settings.read_only_roots, file=source)
    missing = [f"{k}={params.deps[k]}" for k, p in deps.items() if not p.exists()]
    if missing:
        raise ConfigError(None, f"stage {stage!r}: inputs do not exist: {', '.join(missing)} "
                          "(run the stages that produce them first)", key=f"{stage}.deps")
    return deps, finals


def existing_deps(params: StageParams, workspace: Path, stage: str, *, settings: Settings | None = None,
                  source: Path | None = None) -> dict[str, Path]:
    """The stage's input paths, resolved and checked as the runner does, before anything is written."""
    return _checked_paths(params, workspace, stage, settings or load_settings(workspace=workspace), source)[0]


def stage_paths(params: StageParams, workspace: Path, stage: str, settings: Settings | None = None,
                source: Path | None = None) -> StagePaths:
    settings = settings or load_settings(workspace=workspace)
    deps, finals = _checked_paths(params, workspace, stage, settings, source)
    check_replaceable(stage, finals, workspace, settings.state, file=source)
    outs = {}
    for key, final in finals.items():
        # Leftovers of a run that was killed: never complete, never looked at again.
        for stale in final.parent.glob(f".{final.name}.staging-*"):
            _remove(stale)
        staging = final.with_name(f".{final.name}.staging-{os.getpid()}")
        staging.parent.mkdir(parents=True, exist_ok=True)
        if not final.suffix:
            staging.mkdir()
        outs[key] = staging
    return StagePaths(workspace=workspace, deps=deps, outs=outs, settings=settings)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _check_metrics(stage: str, metrics: Any) -> dict[str, float]:
    if not isinstance(metrics, dict):
        raise OrchestraError(f"stage {stage!r} returned {type(metrics).__name__}, expected a dict of metrics")
    clean = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise OrchestraError(f"stage {stage!r}: metric {key!r} is not a finite number: {value!r}")
        clean[str(key)] = float(value)
    return clean


def run_stage(name: str, *, params_file: str | Path = "params.yaml", settings: Settings | None = None,
              track: bool = True) -> dict[str, float]:
    """Run a stage and record its outcome in `.orchestra/stage-status/<name>.json` for the flow:
    `invalid` for problems with parameters or data (`OrchestraError`), `killed` for a requested stop
    (Ctrl-C, SIGTERM), `crash` for the rest."""
    from stagekit.status import write_status

    params_file = Path(params_file).resolve()
    workspace = (settings.workspace if settings else params_file.parent)
    try:
        with stops_prevail():  # a stop that cleanup code turned into another error is a stop
            metrics = _run_stage(name, params_file, settings, track)
    except OrchestraError as exc:
        write_status(workspace, name, ok=False, kind="invalid", message=str(exc))
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (core/stopping.py): stopped, not crashed
        write_status(workspace, name, ok=False, kind="killed", message=str(exc) or "stopped by SIGINT")
        raise
    except BaseException as exc:
        write_status(workspace, name, ok=False, kind="crash", message=f"{type(exc).__name__}: {exc}")
        raise
    write_status(workspace, name, ok=True, metrics=metrics)
    return metrics


def _run_stage(name: str, params_file: Path, settings: Settings | None, track: bool = True) -> dict[str, float]:
    settings = settings or load_settings(workspace=params_file.parent)
    module = stage_module(name)
    all_params = load_params_file(params_file)
    params = validate_params(name, module, all_params, params_file)
    paths = stage_paths(params, settings.workspace, name, settings, params_file)
    finals = {k: resolve_user_path(v, settings.workspace) for k, v in params.outs.items()}
    started = time.perf_counter()
    try:
        if track:
            import mlflow

            from stagekit.tracking import stage_run

            with stage_run(settings, name, params=params.model_dump(mode="json"),
                           deps=list(params.deps.values())):
                metrics = _check_metrics(name, module.run(params, paths))
                _commit_outputs(name, paths, finals)
                metrics["stage_seconds"] = time.perf_counter() - started
                mlflow.log_metrics(metrics)
                summary = settings.state / "stage-summaries" / f"{name}.json"
                atomic_write_json(summary, {"stage": name, "metrics": metrics, "outs": params.outs})
                mlflow.log_artifact(str(summary))
        else:
            metrics = _check_metrics(name, module.run(params, paths))
            _commit_outputs(name, paths, finals)
            metrics["stage_seconds"] = time.perf_counter() - started
    except BaseException:
        _keep_for_inspection(name, paths, settings)
        raise
    finally:
        for staging in paths.outs.values():
            _remove(staging)
    return metrics


def _keep_for_inspection(stage: str, paths: StagePaths, settings: Settings) -> None:
    """A failed stage's partial outputs (e.g. a validation report listing what failed) are moved
    to `.orchestra/failed/<stage>/`, never to their final paths, so nothing is lost or mistaken
    for a complete output."""
    kept = settings.state / "failed" / stage
    _remove(kept)
    for key, staging in paths.outs.items():
        if staging.exists() and (not staging.is_dir() or any(staging.iterdir())):
            kept.mkdir(parents=True, exist_ok=True)
            os.replace(staging, kept / key)


def _commit_outputs(stage: str, paths: StagePaths, finals: dict[str, Path]) -> None:
    missing = [k for k, p in paths.outs.items() if not p.exists()]
    if missing:
        raise OrchestraError(f"stage {stage!r} did not write outputs {missing}")
    for key, staging in paths.outs.items():
        replace_path(staging, finals[key])
    record_outputs(stage, finals.values(), paths.settings.state)


def check_all_params(params_file: Path, stages: list[str], settings: Settings | None = None) -> None:
    """Validate every stage's parameters and paths up front, so a broken file stops a flow before it starts."""
    settings = settings or load_settings(workspace=params_file.resolve().parent)
    all_params = load_params_file(params_file)
    for section in all_params:  # a misspelt section would otherwise be ignored silently
        if section != "base" and not _is_stage(section):
            raise ConfigError(params_file, f"unknown section: no stage {section!r} (stages: {', '.join(stages)})",
                              key=section)
    for name in stages:
        params = validate_params(name, stage_module(name), all_params, params_file)
        check_stage_paths(name, params.deps, params.outs, settings.workspace, state=settings.state,
                          read_only_roots=settings.read_only_roots, file=params_file)


def _is_stage(name: str) -> bool:
    try:
        stage_module(name)
    except ConfigError:
        return False
    return True
