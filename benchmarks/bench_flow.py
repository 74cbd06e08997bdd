"""Orchestration benchmark: cold `orchestra run`, a no-op re-run, and the flow's own overhead.

    python benchmarks/bench_flow.py [--params FILE]

Works on a fresh `git clone` of this repository's HEAD in a temporary folder (as a user would),
with the embedded profile (Prefect's ephemeral API, MLflow on SQLite, local DVC remote).
Overhead = cold flow wall time - the sum of the stages' own run times (from their status files).
Targets (2 cores): no-op re-run under 15 s; overhead under 10% of a cold run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def timed_run(workspace: Path, *args: str) -> float:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("ORCHESTRA_")}
    started = time.perf_counter()
    proc = subprocess.run([str(BIN / "orchestra"), "run", *args], cwd=workspace, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"orchestra run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return elapsed


def stage_seconds(workspace: Path) -> dict[str, float]:
    out = {}
    for path in sorted((workspace / ".orchestra" / "stage-status").glob("*.json")):
        status = json.loads(path.read_text())
        out[status["stage"]] = status["metrics"].get("stage_seconds", 0.0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, help="parameters file to use instead of params.yaml")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-flow-") as tmp:
        workspace = Path(tmp) / "ws"
        subprocess.run(["git", "clone", "-q", str(REPO), str(workspace)], check=True)
        if args.params:
            shutil.copy(args.params, workspace / "params.yaml")
        cold = timed_run(workspace)
        stages = stage_seconds(workspace)
        noop = timed_run(workspace)
        # A process's own start (imports, Prefect's ephemeral server) is part of every run.
        overhead = cold - sum(stages.values())
        print("stages: " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()))
        print(f"cold orchestra run: {cold:.1f} s")
        print(f"no-op re-run: {noop:.1f} s (target < 15 s: {'OK' if noop < 15 else 'ABOVE TARGET'})")
        print(f"orchestration overhead: {overhead:.1f} s = {100 * overhead / cold:.1f}% of the cold run "
              f"(target < 10%: {'OK' if overhead < 0.1 * cold else 'ABOVE TARGET'})")


if __name__ == "__main__":
    main()
