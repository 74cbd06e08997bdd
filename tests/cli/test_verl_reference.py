"""The committed verl reference config cannot drift: the command that regenerates it, run on this
repository's params.yaml, gives the committed `infra/verl/ppo_orchestra.yaml` byte for byte."""

from __future__ import annotations

import difflib
import shlex
from pathlib import Path

import pytest

from orchestra_cli.main import main
from toolorchestra.rl.verl.compose import REFERENCE, REGENERATE

REPO = Path(__file__).resolve().parents[2]


def test_committed_verl_config_is_what_the_composer_writes(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    argv = shlex.split(REGENERATE)[1:]  # orchestra train --backend verl --reference <path>
    assert argv[-1] == REFERENCE.as_posix()
    fresh = tmp_path / "ppo_orchestra.yaml"
    assert main([*argv[:-1], str(fresh), "--params", str(REPO / "params.yaml")]) == 0
    committed = (REPO / REFERENCE).read_text()
    if fresh.read_text() != committed:
        diff = difflib.unified_diff(committed.splitlines(), fresh.read_text().splitlines(), str(REFERENCE),
                                    "composed now", lineterm="", n=1)
        pytest.fail(f"{REFERENCE} is stale; regenerate it from the repository root with `{REGENERATE}`\n"
                    + "\n".join(list(diff)[:40]))
