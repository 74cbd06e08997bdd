"""The retraining flow: every stage of dvc.yaml in dependency order, one Prefect task each.

Stages come from the DVC graph, so a stage added to dvc.yaml joins the flow with no change here.
Each flow run opens a parent MLflow run; each stage's run is its child. Stages run one at a time
(DVC holds a repository lock). `evaluate` and `promote` are the same flow over a sub-graph. A
stage stopped by Ctrl-C or SIGTERM stops the flow as `Stopped` (its MLflow run ends KILLED,
nothing is retried).
"""

from __future__ import annotations

import signal
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.runtime import flow_run

from flows.report import promotion_line, publish_summary
from stagekit.graph import StageFailed, StageOutcome, push, stage_order
from stagekit.runner import check_all_params
from stagekit.tracking import flow_run as mlflow_flow_run
from tasks.stage import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import load_settings
from toolorchestra.core.stopping import Stopped


def run_stages(flow_name: str, workspace: str, targets: list[str] | None, force: list[str] | None,
               push_outputs: bool) -> list[StageOutcome]:
    logger = get_run_logger()
    root = Path(workspace).resolve()
    settings = load_settings(workspace=root)
    order = stage_order(root, targets)
    check_all_params(root / "params.yaml", order, settings)  # a broken params.yaml stops us before any stage
    forced = set(force or [])
    unknown = forced - set(order)
    if unknown:
        raise ConfigError(None, f"names stages not in this flow: {sorted(unknown)}; stages: {order}", key="force")
    outcomes: list[StageOutcome] = []
    with mlflow_flow_run(settings, flow_name, flow_run_id=str(flow_run.get_id() or ""),
                         params={"stages": ",".join(order), "force": ",".join(sorted(forced))}) as parent:
        for name in order:
            try:
                outcome = run_stage.with_options(task_run_name=name)(name, str(root), force=name in forced)
            except StageFailed as exc:
                if exc.kind == "killed":  # Ctrl-C or SIGTERM reached the stage: the flow stops as well
                    raise Stopped(signal.SIGTERM if "SIGTERM" in exc.message else signal.SIGINT) from None
                raise
            logger.info("%s: %s", name, f"ran in {outcome.seconds:.1f}s" if outcome.ran else "up to date, skipped")
            if name == "promote" and outcome.ran and (line := promotion_line(root)):
                # a refusal is a successful run: say plainly that nothing became champion
                (logger.info if line[0] else logger.warning)(line[1])
            outcomes.append(outcome)
        if push_outputs:
            logger.info("dvc push: %s file(s) sent to the remote", push(root))
        publish_summary(flow_name, outcomes, parent.info.run_id, settings)
    return outcomes


@flow(name="retrain", log_prints=True)
def retrain(workspace: str = ".", force: list[str] | None = None, push_outputs: bool = True,
            until: list[str] | None = None) -> list[StageOutcome]:
    """Run every stage of the pipeline that is out of date (or forced); with `until`, only the
    stages those need."""
    return run_stages("retrain", workspace, until or None, force, push_outputs)


@flow(name="evaluate", log_prints=True)
def evaluate(workspace: str = ".", force: list[str] | None = None, push_outputs: bool = True) -> list[StageOutcome]:
    """The `evaluate` stage and whatever it needs that is out of date."""
    return run_stages("evaluate", workspace, ["evaluate"], force, push_outputs)


@flow(name="promote", log_prints=True)
def promote(workspace: str = ".", force: list[str] | None = None, push_outputs: bool = True) -> list[StageOutcome]:
    """The `promote` stage and whatever it needs that is out of date."""
    return run_stages("promote", workspace, ["promote"], force, push_outputs)
