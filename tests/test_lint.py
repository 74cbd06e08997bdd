"""The linter means something: `ruff check .` (configured in pyproject.toml) finds nothing."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
