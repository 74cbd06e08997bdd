"""`orchestra calibrate`: the preference weight on cost that meets a budget per task.

The knob is the served model's default preference vector `{"cost": w}`, rendered as the training
grammar's instruction (`preference.vector_instruction`: w=0.5 "I moderately care about keeping
the bill low", 2 "More than accuracy, ..."). `sweep` runs the calibration tasks (QA items with
gold answers, judged by the training rule `preferences.judge.judge_answer`) once per weight, in
one lockstep batch, exactly as the server would (the model's training system prompt and tools),
and measures accuracy and mean cost per task. `choose` takes, among the weights whose mean cost
meets the budget, the most accurate (then the cheapest): the least accuracy lost against the
unconstrained sweep's best. `record` writes the curve to an MLflow run (experiment
`orchestra-calibration`) and the choice as tags of the model version, which `serve-model` reads as
its default (`models.CALIBRATED_COST_WEIGHT`); a request's own preference overrides it.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.serving.models import CALIBRATED_COST_WEIGHT, ServedModel
from toolorchestra.serving.preference import vector_instruction

DEFAULT_WEIGHTS = (0.0, 0.5, 1.0, 2.0)
EXPERIMENT = "orchestra-calibration"


class CurvePoint(BaseModel):
    cost_weight: float
    preference: str | None
    accuracy: float
    mean_cost_usd: float
    mean_latency_s: float
    meets_budget: bool = False


class Calibration(BaseModel):
    budget_usd: float
    tasks: int
    curve: list[CurvePoint]
    chosen: CurvePoint | None
    best_accuracy: float

    @property
    def accuracy_lost(self) -> float | None:
        return None if self.chosen is None else self.best_accuracy - self.chosen.accuracy


def load_tasks(path: str | Path, max_tasks: int | None) -> list[Any]:
    """QA items with gold answers: one JSONL file, or every `*.jsonl` under a folder's `qa/` (or the folder)."""
    from toolorchestra.episodes.pool import load_qa_file

    path = Path(path)
    if path.is_dir():
        files = sorted((path / "qa").glob("*.jsonl")) or sorted(path.glob("*.jsonl"))
        if not files:
            raise ConfigError(path, "no calibration tasks: expected qa/*.jsonl (the validate stage's output) or *.jsonl")
    elif path.is_file():
        files = [path]
    else:
        raise ConfigError(path, "calibration tasks not found (a QA JSONL file or data/validated)")
    items = [item for f in files for item in load_qa_file(f)]
    if not items:
        raise ConfigError(path, "the calibration task set is empty")
    return items[:max_tasks] if max_tasks else items


def sweep(served: ServedModel, items: Sequence[Any], weights: Sequence[float], *, max_turns: int | None = None,
          max_tokens: int | None = None) -> list[CurvePoint]:
    from toolorchestra.episodes.judge import judge_answer

    orchestrator = served.orchestrator(max_tokens=max_tokens)
    curve = []
    for weight in weights:
        preference = vector_instruction({"cost": weight}, served.tool_names) if weight > 0 else None
        episodes = [orchestrator.start(item.question, preference, max_turns=max_turns) for item in items]
        trajectories = orchestrator.run_episodes(episodes)
        correct = [bool((t.answer or "").strip()) and judge_answer(t.answer, item.answer)
                   for t, item in zip(trajectories, items, strict=True)]
        curve.append(CurvePoint(cost_weight=weight, preference=preference, accuracy=statistics.mean(correct),
                                mean_cost_usd=statistics.mean(t.cost_usd for t in trajectories),
                                mean_latency_s=statistics.mean(t.latency_s for t in trajectories)))
    return curve


def choose(curve: list[CurvePoint], budget_usd: float, tasks: int) -> Calibration:
    marked = [p.model_copy(update={"meets_budget": p.mean_cost_usd <= budget_usd}) for p in curve]
    meeting = [p for p in marked if p.meets_budget]
    chosen = min(meeting, key=lambda p: (-p.accuracy, p.mean_cost_usd, p.cost_weight)) if meeting else None
    return Calibration(budget_usd=budget_usd, tasks=tasks, curve=marked, chosen=chosen,
                       best_accuracy=max(p.accuracy for p in marked))


def calibrate(served: ServedModel, items: Sequence[Any], budget_usd: float,
              weights: Sequence[float] = DEFAULT_WEIGHTS, **limits: Any) -> Calibration:
    if budget_usd < 0:
        raise ConfigError(None, "must not be negative", key="budget")
    if not weights or any(w < 0 for w in weights):
        raise ConfigError(None, f"cost weights must be non-negative, got {list(weights)}", key="weights")
    return choose(sweep(served, items, sorted(set(weights)), **limits), budget_usd, len(items))


def record(result: Calibration, served: ServedModel, settings: Any) -> str:
    """The curve as an MLflow run, the choice as tags of the version; returns the run id."""
    import mlflow

    from toolorchestra.registry.store import client_for
    from toolorchestra.tracing.trajectory import experiment_id_for

    if result.chosen is None:
        raise OrchestraError("nothing to record: no setting meets the budget")
    client = client_for(settings)
    with mlflow.start_run(experiment_id=experiment_id_for(EXPERIMENT),
                          run_name=f"calibrate {served.id} ${result.budget_usd:g}") as run:
        mlflow.log_params({"model_version": served.registered.ref, "budget_usd": result.budget_usd,
                           "tasks": result.tasks, "weights": ",".join(f"{p.cost_weight:g}" for p in result.curve),
                           "chosen_cost_weight": result.chosen.cost_weight})
        for step, point in enumerate(result.curve):
            mlflow.log_metrics({"accuracy": point.accuracy, "mean_cost_usd": point.mean_cost_usd,
                                "cost_weight": point.cost_weight}, step=step)
        mlflow.log_metrics({"chosen_accuracy": result.chosen.accuracy, "chosen_mean_cost_usd": result.chosen.mean_cost_usd,
                            "accuracy_lost": result.accuracy_lost or 0.0})
        mlflow.log_dict(result.model_dump(mode="json"), "calibration.json")
    name, version = served.registered.name, served.registered.version
    for key, value in {CALIBRATED_COST_WEIGHT: result.chosen.cost_weight,
                       "orchestra.calibration.budget_usd": result.budget_usd,
                       "orchestra.calibration.run_id": run.info.run_id}.items():
        client.set_model_version_tag(name, version, key, str(value))
    return run.info.run_id
