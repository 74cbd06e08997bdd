"""Containment of the paths a user names: stage deps/outs in params.yaml, `--out`/`--report` folders.

Every such path is resolved (symlinks included) before anything is read or written:
- an output must lie inside the workspace, and neither be the workspace itself nor lie in (or
  contain) `.git` or `.dvc`, nor be (or contain) the state folder (`.orchestra/`; ad-hoc commands
  write below it);
- an input must lie inside the workspace or under a read-only root: the installed `toolorchestra`
  package (its embedded catalogs and domains) or a folder the user allowed with
  `ORCHESTRA_READ_ONLY_ROOTS` (a JSON list, e.g. `'["/data/tau2"]'`).
Anything else is a `ConfigError` naming the file, the key and the path.

A stage replaces an existing output only if it created it: `owned_outputs` is the record
(`<state>/stage-outputs/<stage>.json`, written by the runner after each commit, plus the outs
`dvc.lock` records for the stage, i.e. what DVC restored); any other existing path is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json

# Folders of the workspace that hold its history and state: never an output, never replaced.
_STATE_NAMES = (".git", ".dvc")


def package_root() -> Path:
    """The installed `toolorchestra` package: read-only data (catalogs, domains) stages may read."""
    import toolorchestra

    return Path(toolorchestra.__file__).resolve().parent


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_user_path(value: str | Path, workspace: Path) -> Path:
    """Resolve `value` as the user meant it: relative to the workspace, `~` expanded, symlinks followed."""
    return (workspace / Path(value).expanduser()).resolve()


def check_output(value: str | Path, workspace: Path, *, state: Path | None = None,
                 file: str | Path | None, key: str) -> Path:
    """The resolved output path, or a ConfigError when it escapes the workspace or hits its state."""
    workspace = workspace.resolve()
    path = resolve_user_path(value, workspace)
    if not is_within(path, workspace):
        raise ConfigError(file, f"output path {str(value)!r} resolves to {path}, outside the workspace "
                          f"{workspace}", key=key)
    if path == workspace:
        raise ConfigError(file, f"output path {str(value)!r} is the workspace itself", key=key)
    # Never in (or around) git's and DVC's folders; around the state folder neither, but inside it
    # is where ad-hoc commands keep their outputs (`.orchestra/cli/...`), and what exists there
    # is still never replaced unless a stage wrote it (check_replaceable).
    state = (state or workspace / ".orchestra").resolve()
    for folder in [workspace / name for name in _STATE_NAMES] + [state]:
        inside = is_within(path, folder) and folder != state
        if inside or is_within(folder, path):
            raise ConfigError(file, f"output path {str(value)!r} ({path}) overlaps the state folder {folder}",
                              key=key)
    return path


def check_input(value: str | Path, workspace: Path, *, read_only_roots: Iterable[Path] = (),
                file: str | Path | None, key: str) -> Path:
    """The resolved input path, or a ConfigError when it is neither in the workspace nor a read-only root."""
    workspace = workspace.resolve()
    path = resolve_user_path(value, workspace)
    roots = [workspace, package_root(), *(Path(r).expanduser().resolve() for r in read_only_roots)]
    if not any(is_within(path, root) for root in roots):
        raise ConfigError(file, f"input path {str(value)!r} resolves to {path}, outside the workspace "
                          f"{workspace} and the read-only roots (allow a folder with ORCHESTRA_READ_ONLY_ROOTS)",
                          key=key)
    return path


def check_stage_paths(stage: str, deps: Mapping[str, str], outs: Mapping[str, str], workspace: Path, *,
                      state: Path | None = None, read_only_roots: Iterable[Path] = (),
                      file: str | Path | None = None) -> tuple[dict[str, Path], dict[str, Path]]:
    """Check every dep and out of a stage's params section; return both as resolved paths."""
    roots = list(read_only_roots)
    resolved_deps = {k: check_input(v, workspace, read_only_roots=roots, file=file, key=f"{stage}.deps.{k}")
                     for k, v in deps.items()}
    resolved_outs = {k: check_output(v, workspace, state=state, file=file, key=f"{stage}.outs.{k}")
                     for k, v in outs.items()}
    seen: dict[Path, str] = {}
    for key, path in resolved_outs.items():
        for other, other_key in seen.items():
            if is_within(path, other) or is_within(other, path):
                raise ConfigError(file, f"outputs {other_key} and {key} overlap ({other}, {path})",
                                  key=f"{stage}.outs.{key}")
        seen[path] = key
    return resolved_deps, resolved_outs


def _ownership_file(state: Path, stage: str) -> Path:
    return state / "stage-outputs" / f"{stage}.json"


def owned_outputs(stage: str, workspace: Path, state: Path) -> set[Path]:
    """The outputs `stage` created: recorded by the runner, or by DVC in `dvc.lock`."""
    owned = _recorded(state, stage)
    lock = workspace / "dvc.lock"
    if lock.is_file():
        try:
            entry = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {}).get(stage) or {}
            owned |= {resolve_user_path(o["path"], workspace) for o in entry.get("outs") or [] if "path" in o}
        except (OSError, yaml.YAMLError, AttributeError, TypeError):
            pass
    return owned


def check_replaceable(stage: str, outs: Mapping[str, Path], workspace: Path, state: Path, *,
                      file: str | Path | None = None) -> None:
    """Refuse to run a stage whose output path exists but was not created by that stage."""
    owned = owned_outputs(stage, workspace, state)
    for key, path in outs.items():
        if (path.exists() or path.is_symlink()) and path not in owned:
            raise ConfigError(file, f"output path {path} exists and was not written by stage {stage!r}; "
                              "refusing to replace it (move it away or choose another path)",
                              key=f"{stage}.outs.{key}")


def _recorded(state: Path, stage: str) -> set[Path]:
    record = _ownership_file(state, stage)
    if not record.is_file():
        return set()
    try:
        return {Path(p) for p in json.loads(record.read_text(encoding="utf-8"))}
    except (OSError, ValueError, TypeError):
        return set()  # an unreadable record owns nothing: the check then refuses, which is safe


def record_outputs(stage: str, outs: Iterable[Path], state: Path) -> None:
    """Remember the outputs `stage` just committed (besides those it wrote before: an ad-hoc run
    with other output paths must not disown the pipeline's), so a later run may replace them."""
    owned = _recorded(state, stage) | set(outs)
    atomic_write_json(_ownership_file(state, stage), sorted(str(p) for p in owned))


def check_output_folder(value: str | Path, workspace: Path, *, state: Path | None = None, key: str) -> Path:
    """A command-line output folder (`--out`, `--report`): inside the workspace and not a file."""
    path = check_output(value, workspace, state=state, file=None, key=key)
    if path.exists() and not path.is_dir():
        raise ConfigError(None, f"{value} is a file; expected a folder to write into", key=key)
    return path


def remove_stale_staging(final: Path) -> list[Path]:
    """Remove the `.NAME.staging-PID` siblings of `final` whose process is gone (a killed stage's
    leftovers); they are never complete and never looked at again. Returns what was removed."""
    import shutil

    removed = []
    for stale in final.parent.glob(f".{final.name}.staging-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and _alive(int(pid)):
            continue  # a stage is writing there right now
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
        removed.append(stale)
    return removed


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
