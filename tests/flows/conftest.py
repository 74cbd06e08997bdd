"""A git + DVC workspace laid out like the project, with tiny parameters, and one Prefect harness."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "synthesize": {"domains": ["library"], "db_size": 12, "tasks_per_domain": 6, "qa_per_domain": 4},
    "describe": {"measure": {"samples_per_category": 1, "categories": ["qa_numeric", "qa_lookup"],
                             "max_turns": 2, "max_tokens": 32, "max_workers": 1}},
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


def make_workspace(root: Path, overrides: dict | None = None) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("pipelines", "toolorchestra"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, root / name)
    (root / ".dvc").mkdir()
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    for section, values in {**TINY, **(overrides or {})}.items():
        params[section] = {**params.get(section, {}), **values}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "workspace")
    return root


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    return make_workspace(tmp_path / "ws")


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
