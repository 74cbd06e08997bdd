"""Layers import downward only (import-linter contracts in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower() or "0 broken" in result.stdout.lower()


def test_library_import_is_light():
    """Importing the library and building a catalog must not pull heavy frameworks."""
    code = (
        "import sys, toolorchestra.agent.loop, toolorchestra.tools.catalog, toolorchestra.episodes.reward;"
        "heavy = {'mlflow', 'prefect', 'dvc', 'ray', 'great_expectations', 'torch', 'faiss'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
