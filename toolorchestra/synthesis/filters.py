"""Task filters of the `validate` stage, each with a count of what it dropped.

In order: `invalid` (does not parse as a tau2 Task), `unknown_tool` (a golden call names a tool
the domain lacks), `replay_error` (a golden call raises on a fresh copy), `trivial` (an empty
trajectory already scores 1: solvable without actions), `duplicate` (same golden calls and
communicate values as an earlier task), and `pass_at_k` (no success in k attempts of a
configurable solver; off unless a solver and k > 0 are given, as in the embedded profile — the
paper drops tasks no LLM solves in pass@8). A solver is any callable `(task, env) -> Trajectory`
acting on a `DomainEnv` already reset to the task.

Usage: `result = filter_tasks(raw_tasks, env)`; `result.kept`, `result.counts`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.engine import ReplayError
from toolorchestra.envs.evaluation import Trajectory, evaluate, golden_state
from toolorchestra.envs.task import Task, parse_task
from toolorchestra.synthesis.procedural import signature

Solver = Callable[[Task, DomainEnv], Trajectory]
FILTERS = ("invalid", "unknown_tool", "replay_error", "trivial", "duplicate", "pass_at_k")


def golden_solver(task: Task, env: DomainEnv) -> Trajectory:
    """Performs the golden actions on the env and says every communicate value (a plumbing check)."""
    for action in task.actions:
        env.call(action.name, action.arguments)
    return Trajectory.golden(task)


def empty_solver(task: Task, env: DomainEnv) -> Trajectory:
    """Does nothing: every task with actions fails (shows the filter dropping unsolved tasks)."""
    return Trajectory()


SOLVERS: dict[str, Solver] = {"golden": golden_solver, "empty": empty_solver}


def resolve_solver(name: str) -> Solver:
    if name not in SOLVERS:
        raise ConfigError(None, f"unknown solver {name!r}; known: {sorted(SOLVERS)}", "pass_at_k.solver")
    return SOLVERS[name]


class FilterResult(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    kept: list[Task] = Field(default_factory=list)
    dropped: dict[str, list[str]] = Field(default_factory=lambda: {f: [] for f in FILTERS})
    reasons: dict[str, str] = Field(default_factory=dict)
    """Task id -> why it was dropped."""
    golden_hashes: dict[str, str] = Field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        dropped = {f"dropped_{k}": len(v) for k, v in self.dropped.items()}
        return {"input": len(self.kept) + sum(dropped.values()), **dropped, "kept": len(self.kept)}


def filter_tasks(
    tasks: list[Task | dict[str, Any]],
    env: DomainEnv,
    *,
    solver: Solver | None = None,
    k: int = 0,
) -> FilterResult:
    result = FilterResult()
    seen: set[str] = set()

    def drop(name: str, task_id: str, reason: str) -> None:
        result.dropped[name].append(task_id)
        result.reasons[task_id] = f"{name}: {reason}"

    for index, raw in enumerate(tasks):
        try:
            task = raw if isinstance(raw, Task) else parse_task(raw, source="tasks.json", index=index)
        except ConfigError as exc:
            tid = raw.get("id") if isinstance(raw, dict) and isinstance(raw.get("id"), str) else f"#{index}"
            drop("invalid", tid, str(exc))
            continue
        unknown = sorted({a.name for a in task.actions} - set(env.engine.specs))
        if unknown:
            drop("unknown_tool", task.id, f"no tool named {unknown}")
            continue
        try:
            state, _ = golden_state(env.engine, env.base, task)
        except ReplayError as exc:
            drop("replay_error", task.id, str(exc))
            continue
        expected = state.hash()
        empty = evaluate(task, Trajectory(), engine=env.engine, base=env.base, expected_hash=expected)
        if empty.reward == 1.0:
            drop("trivial", task.id, "an empty trajectory already scores 1")
            continue
        sig = signature(task)
        if sig in seen:
            drop("duplicate", task.id, "same golden calls and communicate values as an earlier task")
            continue
        seen.add(sig)
        if solver is not None and k > 0 and not _solved(task, env, solver, k):
            drop("pass_at_k", task.id, f"not solved in {k} attempts")
            continue
        result.golden_hashes[task.id] = expected
        result.kept.append(task)
    return result


def _solved(task: Task, env: DomainEnv, solver: Solver, k: int) -> bool:
    for _ in range(k):
        env.reset(task)
        try:
            trajectory = solver(task, env)
        except Exception:
            continue
        if env.score(trajectory).reward == 1.0:
            return True
    return False
