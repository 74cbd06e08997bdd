"""Per-step training metrics to MLflow, when a run is active (the stage runner opens one).

`StepMetrics` is a transformers `TrainerCallback`: every `on_log` it sends the numeric logs of the
step (TRL's loss, KL, clip ratios, step time, and the orchestrator metrics the reward logs under
`orchestra/...`) to the active MLflow run under a phase prefix (`sft/`, `grpo/`), adds tokens/s
from TRL's token counter, and keeps the last values for the stage's summary metrics. Without an
active run it only keeps them (tests, ad-hoc use).
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from transformers import TrainerCallback

_BAD_KEY = re.compile(r"[^A-Za-z0-9_\-./ ]")


def metric_key(prefix: str, key: str) -> str:
    return _BAD_KEY.sub("_", f"{prefix}{key}")


class StepMetrics(TrainerCallback):
    def __init__(self, prefix: str, *, step_offset: int = 0) -> None:
        self.prefix, self.step_offset = prefix, step_offset
        self.history: list[dict[str, float]] = []
        self._last_tokens: float | None = None
        self._last_time: float | None = None

    @property
    def last(self) -> dict[str, float]:
        return self.history[-1] if self.history else {}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last_time = time.perf_counter()
        self._last_tokens = float(state.num_input_tokens_seen or 0)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs:
            return
        row = {k: float(v) for k, v in logs.items()
               if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))}
        now = time.perf_counter()
        if "num_tokens" in row:  # a training step (not the end-of-training summary)
            tokens = row["num_tokens"]
            if self._last_time is not None and self._last_tokens is not None and now > self._last_time:
                row["tokens_per_s"] = (tokens - self._last_tokens) / (now - self._last_time)
            self._last_time, self._last_tokens = now, tokens
        row["step"] = float(state.global_step)
        self.history.append(row)
        try:
            from mlflow import active_run, log_metrics
        except ImportError:  # mlflow absent (a bare GPU box, where the repo's mlflow/ folder is a namespace package)
            return
        if active_run() is not None:
            log_metrics({metric_key(self.prefix, k): v for k, v in row.items() if k != "step"},
                        step=self.step_offset + state.global_step)
