"""Ray fan-out on a real local cluster (`ray start --head`), reached through `RAY_ADDRESS`.

The `synthesize` stage runs each domain as a Ray task when `RAY_ADDRESS` is set; its outputs
must be byte for byte those of the serial run with the same seed.
"""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path

import pytest
from cluster_services import BIN, base_env, make_cluster_workspace

pytestmark = pytest.mark.slow
DOMAINS = {"synthesize": {"deps": {}, "domains": ["library", "clinic"], "db_size": 12, "tasks_per_domain": 5, "qa_per_domain": 3}}


def run_synthesize(workspace: Path, **env: str) -> dict:
    proc = subprocess.run([str(BIN / "orchestra"), "stage", "synthesize"], cwd=workspace, env=base_env(**env),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    status = json.loads((workspace / ".orchestra" / "stage-status" / "synthesize.json").read_text())
    return status["metrics"]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_synthesize_on_a_ray_cluster_equals_the_serial_run(ray_head, tmp_path):
    serial_ws = make_cluster_workspace(tmp_path / "serial", DOMAINS)
    ray_ws = make_cluster_workspace(tmp_path / "ray", DOMAINS)

    serial = run_synthesize(serial_ws)
    assert not any(":task_name:" in log for log in ray_head.task_logs())
    on_ray = run_synthesize(ray_ws, RAY_ADDRESS=ray_head.address, RAY_AUTH_MODE="disabled")

    assert serial["ray_tasks"] == 0 and on_ray["ray_tasks"] == 2
    # the cluster's workers ran the domains (each writes the task it runs to its log)
    assert sum(log.count(":task_name:_call") for log in ray_head.task_logs()) >= 1
    timing = {"ray_tasks", "stage_seconds"}
    assert {k: v for k, v in on_ray.items() if k not in timing} == {k: v for k, v in serial.items() if k not in timing}
    for out in ("data/toolscale", "data/qa"):
        files = tree(serial_ws / out)
        assert files and tree(ray_ws / out) == files
        _, mismatch, errors = filecmp.cmpfiles(serial_ws / out, ray_ws / out, files, shallow=False)
        assert not mismatch and not errors, (out, mismatch, errors)
    assert ray_head.service.alive()  # the stage disconnected; the cluster stays up for others
