"""The DVC stage graph as the flows see it: order, status, reproduction, push.

DVC owns caching and hashing: a stage whose dependencies, parameters and outputs match `dvc.lock`
is skipped; one that runs is reproduced by `dvc repro --single-item` in a subprocess, so DVC takes
its repository lock and records the new hashes in `dvc.lock`.

A stage that fails tells why through a status file the runner writes
(`.orchestra/stage-status/<name>.json`): `invalid` (bad parameters or data; retrying cannot help)
or `crash` (anything else; worth a retry).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.fs import atomic_write_json

STATUS_DIR = Path(".orchestra") / "stage-status"


class StageFailed(OrchestraError):
    def __init__(self, stage: str, kind: str, message: str) -> None:
        self.stage, self.kind = stage, kind
        super().__init__(f"stage {stage!r} failed ({kind}): {message}")

    @property
    def transient(self) -> bool:
        return self.kind != "invalid"


class StageOutcome(BaseModel):
    stage: str
    ran: bool
    seconds: float = 0.0
    metrics: dict[str, float] = {}
    changes: dict[str, Any] | list[Any] = {}
    """What DVC saw changed (why it ran); empty when skipped."""


@contextlib.contextmanager
def _repo(workspace: Path) -> Iterator[Any]:
    """A dvc Repo, opened with the workspace as working folder (DVC resolves outputs against the
    current folder; stages run one at a time, so changing it briefly is safe)."""
    from dvc.repo import Repo

    with contextlib.chdir(workspace), Repo(str(workspace)) as repo:
        yield repo


def stage_order(workspace: Path, targets: list[str] | None = None) -> list[str]:
    """Stage names in dependency order (upstream first); with `targets`, only their sub-graph."""
    import networkx as nx

    with _repo(workspace) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        names = {stage: stage.name for stage in graph.nodes}
        order = [names[s] for s in reversed(list(nx.topological_sort(graph)))]
        if targets:
            unknown = sorted(set(targets) - set(order))
            if unknown:
                raise OrchestraError(f"no stages {unknown} in dvc.yaml; known: {order}")
            keep = set(targets)
            for stage, name in names.items():
                if name in targets:
                    keep |= {names[d] for d in nx.descendants(graph, stage)}
            order = [n for n in order if n in keep]
    return order


def stage_changes(workspace: Path, name: str) -> Any:
    """DVC's status for one stage: empty when it is up to date."""
    with _repo(workspace) as repo:
        return repo.status(targets=[name]).get(name, {})


def status_file(workspace: Path, name: str) -> Path:
    return workspace / STATUS_DIR / f"{name}.json"


def write_status(workspace: Path, name: str, *, ok: bool, kind: str | None = None, message: str = "",
                 metrics: dict[str, float] | None = None) -> None:
    atomic_write_json(status_file(workspace, name), {
        "stage": name, "ok": ok, "kind": kind, "message": message, "metrics": metrics or {}, "time": time.time(),
    })


def read_status(workspace: Path, name: str) -> dict[str, Any]:
    try:
        return json.loads(status_file(workspace, name).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def reproduce(workspace: Path, name: str, *, force: bool = False, env: dict[str, str] | None = None,
              timeout_s: float | None = None) -> StageOutcome:
    """Run one stage through DVC unless it is up to date (or `force`)."""
    changes = stage_changes(workspace, name)
    if not changes and not force:
        return StageOutcome(stage=name, ran=False)
    status_file(workspace, name).unlink(missing_ok=True)
    cmd = [str(Path(sys.executable).parent / "dvc"), "repro", "--single-item", name]
    if force:
        cmd.append("--force")
    run_env = {**os.environ, **(env or {})}
    # dvc.yaml calls `orchestra`: make sure the same environment's console scripts are found.
    run_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{run_env.get('PATH', '')}"
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workspace, env=run_env, capture_output=True, text=True, timeout=timeout_s)
    seconds = time.perf_counter() - started
    status = read_status(workspace, name)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        kind = status.get("kind") or ("lock" if "lock" in tail.lower() else "crash")
        raise StageFailed(name, kind, status.get("message") or tail)
    return StageOutcome(stage=name, ran=True, seconds=seconds, metrics=status.get("metrics", {}), changes=changes)


def push(workspace: Path, remote: str | None = None) -> str:
    """`dvc push` every tracked output to the remote; returns DVC's summary line."""
    cmd = [str(Path(sys.executable).parent / "dvc"), "push"] + (["-r", remote] if remote else [])
    proc = subprocess.run(cmd, cwd=workspace, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OrchestraError(f"dvc push failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    return (proc.stdout.strip().splitlines() or [""])[-1]
