"""A stage run's outcome, as the runner records it for the flow (`.orchestra/stage-status/<name>.json`).

`invalid` means bad parameters or data (retrying cannot help); `crash` means anything else (worth
a retry). The runner writes it; the graph reads it after DVC has run the stage in a subprocess.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from toolorchestra.core.fs import atomic_write_json

STATUS_DIR = Path(".orchestra") / "stage-status"


def status_file(workspace: Path, name: str) -> Path:
    return workspace / STATUS_DIR / f"{name}.json"


def write_status(workspace: Path, name: str, *, ok: bool, kind: str | None = None, message: str = "",
                 metrics: dict[str, float] | None = None) -> None:
    atomic_write_json(status_file(workspace, name), {
        "stage": name, "ok": ok, "kind": kind, "message": message, "metrics": metrics or {}, "time": time.time(),
    })


def read_status(workspace: Path, name: str) -> dict[str, Any]:
    try:
        return json.loads(status_file(workspace, name).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
