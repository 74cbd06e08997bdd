"""One orchestrator episode as one MLflow trace (MLflow 3 tracing).

`log_trajectory_trace(trajectory, name=..., run_id=..., experiment_id=...)` writes, after the
episode, a trace whose root span (`AGENT`) holds the task, preference and budget as inputs and
the answer, stop reason and why as outputs, with one child span per policy turn (`CHAT_MODEL`,
the generated text as output) and one per tool or expert call (`TOOL`, arguments in, observation
out). Spans carry `cost_usd`, `latency_s`, `ok`/`error` and tokens as attributes (MLflow's
`mlflow.chat.tokenUsage`, which the UI sums per trace), and the real start and end times the loop
recorded (`Turn.started_at`, `tool_started_at`; sequential from the episode's end when a
trajectory lacks them). Inputs and outputs are cut to `max_chars` and redacted (`redact.py`).

`run_id` links the trace to a run (`mlflow.sourceRun` metadata: the run's Traces tab, and
`mlflow.search_traces(run_id=...)`); without it MLflow links the active run, if any. Logging a
trace must never fail the caller: errors are logged and `None` returned.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from toolorchestra.agent.trajectory import Trajectory, Turn
from toolorchestra.llm.base import Usage
from toolorchestra.tracing.redact import redact, secret_values

log = logging.getLogger(__name__)
MAX_CHARS = 2000
SOURCE_RUN = "mlflow.sourceRun"  # mlflow.tracing.constant.TraceMetadataKey.SOURCE_RUN


def _cut(value: Any, secrets: list[str], max_chars: int) -> Any:
    """Redacted, and strings cut to `max_chars` (inside dicts and lists too)."""
    if isinstance(value, str):
        value = redact(value, secrets)
        return value if len(value) <= max_chars else value[:max_chars] + f"... [{len(value) - max_chars} more]"
    if isinstance(value, dict):
        return {k: _cut(v, secrets, max_chars) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut(v, secrets, max_chars) for v in value]
    return value


def _usage(used: Usage) -> dict[str, int]:
    return {"input_tokens": used.prompt_tokens, "output_tokens": used.completion_tokens,
            "total_tokens": used.total_tokens}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _timeline(trajectory: Trajectory, ended: float) -> list[tuple[float, float]]:
    """(policy start, tool start) per turn: as recorded, else laid out back to back ending at `ended`."""
    clock = ended - trajectory.latency_s
    out = []
    for turn in trajectory.turns:
        policy_start = turn.started_at if turn.started_at is not None else clock
        policy_s = max(turn.latency_s - turn.tool_latency_s, 0.0)
        tool_start = turn.tool_started_at if turn.tool_started_at is not None else policy_start + policy_s
        out.append((policy_start, tool_start))
        clock = max(clock, tool_start + turn.tool_latency_s)
    return out


def log_trajectory_trace(trajectory: Trajectory, *, name: str = "orchestra.episode", run_id: str | None = None,
                         experiment_id: str | None = None, tags: dict[str, str] | None = None,
                         attributes: dict[str, Any] | None = None, max_chars: int = MAX_CHARS,
                         ended: float | None = None) -> str | None:
    """Log `trajectory` as a trace (see the module docstring); returns the trace id."""
    try:
        return _log(trajectory, name=name, run_id=run_id, experiment_id=experiment_id, tags=tags or {},
                    attributes=attributes or {}, max_chars=max_chars, ended=ended or time.time())
    except Exception:  # a trace is observability: never the reason an episode or a request fails
        log.warning("could not log the trajectory as an MLflow trace", exc_info=True)
        return None


def _log(trajectory: Trajectory, *, name: str, run_id: str | None, experiment_id: str | None,
         tags: dict[str, str], attributes: dict[str, Any], max_chars: int, ended: float) -> str:
    import mlflow
    from mlflow.entities import SpanStatusCode, SpanType

    secrets = secret_values()
    times = _timeline(trajectory, ended)
    begin = min([t for pair in times for t in pair] or [ended - trajectory.latency_s])
    ends = [max(p + t.latency_s - t.tool_latency_s, s + t.tool_latency_s)
            for (p, s), t in zip(times, trajectory.turns, strict=True)]
    finish = max([ended, *ends])
    root = mlflow.start_span_no_context(
        name, span_type=SpanType.AGENT, experiment_id=experiment_id, start_time_ns=_ns(begin),
        inputs=_cut({"task": trajectory.task, "preference": trajectory.preference,
                     "budget_usd": trajectory.budget_usd}, secrets, max_chars),
        attributes={"policy": trajectory.policy, **attributes},
        tags={k: str(v) for k, v in tags.items()}, metadata={SOURCE_RUN: run_id} if run_id else None,
    )
    for turn, (policy_start, tool_start) in zip(trajectory.turns, times, strict=True):
        _turn_spans(root, turn, trajectory.policy, policy_start, tool_start, secrets, max_chars)
    totals = trajectory.tokens
    failed = trajectory.stop_reason == "policy_error"
    root.end(
        outputs=_cut({"answer": trajectory.answer, "stop_reason": trajectory.stop_reason,
                      "reason": trajectory.error}, secrets, max_chars),
        attributes={"cost_usd": trajectory.cost_usd, "latency_s": trajectory.latency_s,
                    "turns": len(trajectory.turns), "tool_calls": trajectory.tool_calls,
                    "stop_reason": str(trajectory.stop_reason), "format_valid": trajectory.format_valid,
                    "tokens": {model: _usage(used) for model, used in totals.items()}},
        status=SpanStatusCode.ERROR if failed else SpanStatusCode.OK, end_time_ns=_ns(finish),
    )
    return root.trace_id


def _turn_spans(root: Any, turn: Turn, policy: str, policy_start: float, tool_start: float,
                secrets: list[str], max_chars: int) -> None:
    import mlflow
    from mlflow.entities import SpanStatusCode, SpanType

    policy_s = max(turn.latency_s - turn.tool_latency_s, 0.0)
    policy_cost = turn.cost_usd - turn.tool_cost_usd
    span = mlflow.start_span_no_context(f"policy turn {turn.index}", span_type=SpanType.CHAT_MODEL, parent_span=root,
                                        inputs={"turn": turn.index}, start_time_ns=_ns(policy_start),
                                        attributes={"model": policy})
    span.end(outputs=_cut(turn.text, secrets, max_chars), end_time_ns=_ns(policy_start + policy_s),
             attributes={"mlflow.chat.tokenUsage": _usage(turn.policy_usage), "cost_usd": policy_cost,
                         "latency_s": policy_s})
    if turn.tool is None:
        return
    status = SpanStatusCode.OK if turn.ok else SpanStatusCode.ERROR
    span = mlflow.start_span_no_context(f"tool {turn.tool}", span_type=SpanType.TOOL, parent_span=root,
                                        inputs=_cut(turn.arguments or {}, secrets, max_chars),
                                        start_time_ns=_ns(tool_start), attributes={"tool": turn.tool})
    expert_tokens = sum((u for u in turn.tool_usage.values()), Usage())
    extra: dict[str, Any] = {"cost_usd": turn.tool_cost_usd, "latency_s": turn.tool_latency_s, "ok": turn.ok,
                             "error": str(turn.error), "expert_tokens": {a: _usage(u) for a, u in turn.tool_usage.items()}}
    if turn.tool_usage:
        extra["mlflow.chat.tokenUsage"] = _usage(expert_tokens)
    span.end(outputs=_cut(turn.observation, secrets, max_chars), attributes=extra, status=status,
             end_time_ns=_ns(tool_start + turn.tool_latency_s))


def experiment_id_for(name: str) -> str:
    """The id of the experiment `name` (created when missing), on the current tracking URI."""
    import mlflow

    found = mlflow.get_experiment_by_name(name)
    return found.experiment_id if found is not None else mlflow.create_experiment(name)
