"""Throw-away project workspaces for flow and cluster tests: a git + DVC folder laid out like this
repository (its code, dvc.yaml, a parameters file with overrides), committed."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TINY_PROFILE = REPO / "params" / "tiny.yaml"
"""The CPU toy profile: a complete parameters file, the whole graph in minutes."""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def make_project_workspace(root: Path, params: dict | None = None, *, profile: Path = REPO / "params.yaml",
                           folders: Iterable[str] = (), files: Iterable[str] = ()) -> Path:
    """`root` with the library, the stages and `folders`/`files` of this repository, and
    `profile` (a complete parameters file) as its params.yaml; each section of `params` is merged
    over the profile's (top-level keys of a section replace the profile's)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # every folder dvc.yaml lists as deps (the vendored databases the demo ingests: its unseen
    # domain and its fourth training domain)
    for folder in ("pipelines", "stagekit", "toolorchestra", "third_party/toolscale/restaurant",
                   "third_party/toolscale/movie", *folders):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    for name in ("dvc.yaml", ".dvcignore", ".gitignore", *files):
        shutil.copy(REPO / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    merged = yaml.safe_load(profile.read_text())
    for section, values in (params or {}).items():
        merged[section] = {**merged.get(section, {}), **values}
    (root / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "workspace")
    return root
