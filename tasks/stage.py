"""The Prefect task that runs one DVC stage, with retries for transient failures only."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.tasks import exponential_backoff

from stagekit.graph import StageFailed, StageOutcome, reproduce


def _transient_only(task, task_run, state) -> bool:
    """Retry crashes and lock contention; never bad parameters or data (they fail the same again)."""
    try:
        state.result(raise_on_failure=True)
    except StageFailed as exc:
        return exc.transient
    except Exception:
        return True
    return False


@task(
    name="stage",
    task_run_name="{name}",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.2,
    retry_condition_fn=_transient_only,
    # DVC owns caching of stages (dvc.lock); Prefect must not serve a stale result.
    cache_policy=None,
    persist_result=False,
)
def run_stage(name: str, workspace: str, force: bool = False) -> StageOutcome:
    return reproduce(Path(workspace), name, force=force)
