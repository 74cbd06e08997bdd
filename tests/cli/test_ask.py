"""`orchestra ask` as a user runs it: the installed console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ORCHESTRA = Path(sys.executable).parent / "orchestra"


def orchestra(*args, cwd=REPO, timeout=600):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([str(ORCHESTRA), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def test_broken_catalog_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools:\n  - {name: x, kind: code}\n")
    result = orchestra("ask", "hi", "--catalog", str(bad))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "backend" in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_policy_is_a_clear_error():
    result = orchestra("ask", "hi", "--policy", "nonexistent-model", "--tools", "ask_direct")
    assert result.returncode == 2 and "neither a catalog model alias" in result.stderr


@pytest.mark.slow
def test_ask_runs_the_real_smollm2_policy_and_prints_a_trajectory(smollm2_dir):
    result = orchestra("ask", "What is 17 * 23?", "--json", "--max-turns", "3")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["policy"] == "smollm2-135m-instruct"
    assert out["turns"] and out["stop_reason"] in {"final_message", "answer_tool", "max_turns"}
    for turn in out["turns"]:
        assert {"tool", "arguments", "observation", "cost_usd", "latency_s"} <= set(turn)
        assert turn["latency_s"] > 0 and turn["cost_usd"] > 0
    policy_tokens = out["tokens"]["smollm2-135m-instruct"]
    assert policy_tokens["prompt_tokens"] > 100
    # on llama.cpp (engine auto, a CPU) a later turn reads the earlier turns from the prefix cache
    assert (policy_tokens["cached_prompt_tokens"] > 0) == (len(out["turns"]) > 1)
    assert out["cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in out["turns"]))
