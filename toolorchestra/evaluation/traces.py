"""Each evaluation episode as an MLflow trace linked to the evaluation's run.

`EpisodeTracer(run_id, experiment_id)` is the `on_episode` hook of `runner.evaluate`: every judged
`TaskRecord` becomes one trace (`tracing.trajectory`) tagged with its method, benchmark, task,
variant and verdict, so a stakeholder opens the evaluation run's Traces tab and sees what each
method did on each task. `for_active_run()` targets the MLflow run in progress (the evaluate
stage's), or gives None outside one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.evaluation.metrics import TaskRecord
from toolorchestra.tracing.trajectory import log_trajectory_trace


@dataclass
class EpisodeTracer:
    run_id: str
    experiment_id: str
    trace_ids: list[str] = field(default_factory=list)

    @classmethod
    def for_active_run(cls) -> EpisodeTracer | None:
        import mlflow

        run = mlflow.active_run()
        return cls(run.info.run_id, run.info.experiment_id) if run is not None else None

    def __call__(self, record: TaskRecord) -> None:
        trajectory = Trajectory.model_validate(record.trajectory)
        tags = {"orchestra.method": record.method, "orchestra.benchmark": record.benchmark,
                "orchestra.task": record.task_id, "orchestra.variant": record.variant,
                "orchestra.correct": str(record.correct).lower(), "orchestra.kind": record.kind}
        trace_id = log_trajectory_trace(trajectory, name=f"eval {record.method}", run_id=self.run_id,
                                        experiment_id=self.experiment_id, tags=tags,
                                        attributes={"correct": record.correct, "key": record.key})
        if trace_id is not None:
            self.trace_ids.append(trace_id)
