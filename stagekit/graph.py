"""The DVC stage graph as the flows see it: order, status, reproduction, push.

DVC owns caching and hashing: a stage whose dependencies, parameters and outputs match `dvc.lock`
is skipped; one that runs is reproduced by `dvc repro --single-item` in a subprocess, so DVC takes
its repository lock and records the new hashes in `dvc.lock`.

A stage that fails tells why through the status file the runner writes (`stagekit.status`):
`invalid` (bad parameters or data; retrying cannot help), `killed` (stopped by Ctrl-C or SIGTERM;
never retried) or `crash` (anything else; worth a retry).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from stagekit.status import read_status, status_file
from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.paths import remove_stale_staging


class StageFailed(OrchestraError):
    def __init__(self, stage: str, kind: str, message: str) -> None:
        self.stage, self.kind, self.message = stage, kind, message
        super().__init__(f"stage {stage!r} failed ({kind}): {message}")

    def __reduce__(self):
        return (type(self), (self.stage, self.kind, self.message))

    @property
    def transient(self) -> bool:
        """Worth a retry: not bad parameters or data, and not a stop someone asked for."""
        return self.kind not in ("invalid", "killed")


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


def reproduce(workspace: Path, name: str, *, force: bool = False) -> StageOutcome:
    """Run one stage through DVC (in this process; the stage's command is a subprocess) unless it
    is up to date, or `force`."""
    from dvc.exceptions import DvcException
    from dvc.lock import LockError

    changes = stage_changes(workspace, name)
    if not changes and not force:
        return StageOutcome(stage=name, ran=False)
    status_file(workspace, name).unlink(missing_ok=True)
    # dvc.yaml calls `orchestra`: the same environment's console scripts must come first.
    bin_dir = str(Path(sys.executable).parent)
    if not os.environ.get("PATH", "").startswith(bin_dir):
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    started = time.perf_counter()
    try:
        with _repo(workspace) as repo:
            repo.reproduce(name, single_item=True, force=force)
    except LockError as exc:
        raise StageFailed(name, "lock", f"DVC repository is locked by another process: {exc}") from None
    except DvcException as exc:
        status = read_status(workspace, name)
        raise StageFailed(name, status.get("kind") or "crash", status.get("message") or str(exc)) from None
    seconds = time.perf_counter() - started
    # Restored from DVC's run cache, the stage did not run: clear a killed run's staging leftovers.
    for out in _stage_outs(workspace, name):
        remove_stale_staging(out)
    status = read_status(workspace, name)
    return StageOutcome(stage=name, ran=True, seconds=seconds, metrics=status.get("metrics", {}), changes=changes)


def _stage_outs(workspace: Path, name: str) -> list[Path]:
    with _repo(workspace) as repo:
        return [Path(out.fs_path) for stage in repo.index.stages if stage.name == name for out in stage.outs]


def push(workspace: Path, remote: str | None = None) -> int:
    """`dvc push` every tracked output to the (default) remote; returns the number of files sent."""
    from dvc.exceptions import DvcException

    try:
        with _repo(workspace) as repo:
            return int(repo.push(remote=remote) or 0)
    except DvcException as exc:
        raise OrchestraError(f"dvc push failed: {exc}") from None
