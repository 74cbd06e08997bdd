"""`dvc.yaml` tells the whole truth: every project module a stage's code can reach is in its deps.

A stage is re-run by DVC only when one of its deps changes, so a module the stage imports (at top
level or inside a function) but does not list would let a code change leave a stale output that
DVC calls up to date. The closure is computed with `ast` from `pipelines/<stage>.py` and the stage
runner (`stagekit/runner.py`, which runs every stage), following imports inside the project only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("toolorchestra", "stagekit", "pipelines")
RUNNER = "stagekit.runner"


def module_file(name: str, root: Path = REPO) -> Path | None:
    """The file of a project module or package, None outside the project."""
    if name.split(".")[0] not in PROJECT:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(path: Path) -> set[str]:
    """Every module an `import` / `from ... import` anywhere in the file names (with each
    `from X import Y` also tried as the submodule `X.Y`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def closure(start: list[str], root: Path = REPO) -> set[Path]:
    """Files of every project module reachable from `start`, package `__init__`s included."""
    seen: set[Path] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            path = module_file(".".join(parts[:i]), root)
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(imported_modules(path))
    return seen


def stage_deps(root: Path = REPO) -> dict[str, list[str]]:
    stages = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    return {name: [d for d in stage.get("deps", []) if "${" not in d] for name, stage in stages.items()}


def uncovered(stage: str, deps: list[str], root: Path = REPO) -> list[str]:
    """Reached files that no dep path (a file or a folder above it) covers."""
    covers = [(root / d).resolve() for d in deps]
    reached = closure([f"pipelines.{stage}", RUNNER], root)
    return sorted(str(p.relative_to(root)) for p in reached
                  if not any(p == c or c in p.parents for c in covers))


@pytest.mark.parametrize("stage", sorted(stage_deps()))
def test_every_reached_module_is_a_dep(stage):
    missing = uncovered(stage, stage_deps()[stage])
    assert not missing, f"dvc.yaml: stage {stage!r} imports modules missing from its deps: {missing}"


def test_a_removed_dep_is_caught(tmp_path):
    """The check itself can fail: drop one library package from a copy of dvc.yaml."""
    deps = stage_deps()["train"]
    dropped = next(d for d in deps if d.startswith("toolorchestra/"))
    remaining = [d for d in deps if d != dropped]
    assert uncovered("train", deps) == []
    assert any(m.startswith(dropped) for m in uncovered("train", remaining)), dropped
