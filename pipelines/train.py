"""Stage `train`: the orchestrator trained end to end with GRPO on the composite reward.

Inputs (`deps`):
- `tasks` (required): validated tasks (`data/validated`), where tool-use instances find their
  domain databases;
- `dataset` (optional): the training set the `preferences` stage exported (a `datasets` folder,
  verl parquet or JSONL rows); without it, instances are assembled here from `tasks` (and
  `preferences`, a JSONL of preference pairs, when given) with `data.assembly` settings;
- `catalog` (optional): the described tool catalog (`data/catalog/tools.json`); default: the
  embedded one.

Outputs: `outs.model`, the checkpoint folder (`models/orchestrator/`: safetensors, tokenizer, chat
template, catalog, manifest); optional `outs.warm_start` (`models/warm_start/`), the SFT-only
checkpoint in the same format, which the evaluate stage runs as the `sft_only` baseline.
`outs.model` holds GRPO's policy, or the warm start when GRPO's solved fewer of the dataset's
`validation` tasks (`select`; the manifest's `selection` says which and why).

`backend: trl` (embedded default) runs an SFT warm start and GRPO here, on CPU or one GPU, and
logs per-step metrics to the stage's MLflow run (with system metrics) and the checkpoint as an
artifact. `backend: verl` composes verl's configuration and files (see `toolorchestra.rl.verl`),
launches `verl.trainer.main_ppo` on the Ray cluster (`RAY_ADDRESS` or `verl.ray_address`), and
merges the final actor checkpoint into the output folder.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stagekit.contract import StageParams, StagePaths
from toolorchestra.rl.config import TrainConfig

log = logging.getLogger(__name__)


class Params(StageParams, TrainConfig):
    REQUIRED_DEPS = {"tasks": "data/validated"}
    REQUIRED_OUTS = {"model": "models/orchestrator"}


def train_config(params: Params) -> TrainConfig:
    return TrainConfig.model_validate(params.model_dump(exclude={"deps", "outs"}))


def load_inputs(config: TrainConfig, deps: dict[str, Path]) -> tuple[Any, list[Any], Any, list[Any]]:
    """(catalog, training instances, domain locator, validation instances) from the stage's inputs;
    no validation instances when the dataset has no `select.split`."""
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.episodes.rows import load_instances
    from toolorchestra.preferences.assemble import build_instances
    from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog

    catalog = load_catalog(deps["catalog"]) if "catalog" in deps else load_embedded_catalog()
    if "dataset" in deps:
        instances = load_instances(deps["dataset"], split=config.data.split)
        validation = load_instances(deps["dataset"], split=config.select.split, missing_ok=True)
    else:
        assembly = {"seed": config.seed, **config.data.assembly}
        splits = build_instances(deps["tasks"], catalog, preferences=deps.get("preferences"), **assembly)
        instances, validation = splits["train"], splits.get("validation", [])
    roots = [deps["tasks"]] + [deps[k] for k in ("domains",) if k in deps]
    return catalog, instances, DomainLocator(roots), validation


@contextlib.contextmanager
def system_metrics() -> Iterator[None]:
    """MLflow system metrics (CPU, memory, GPU) on the active run while training."""
    import mlflow

    run = mlflow.active_run()
    if run is None:
        yield
        return
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run.info.run_id, sampling_interval=5)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    import mlflow

    settings = paths.settings
    config = train_config(params)
    out = paths.outs["model"]
    if config.backend == "verl":
        from toolorchestra.rl.verl.launch import train_verl

        catalog, instances, domains, _ = load_inputs(config, paths.deps)
        return train_verl(config, instances, catalog=catalog, domains=domains, settings=settings, out_dir=out,
                          catalog_path=paths.deps.get("catalog"))

    from toolorchestra.rl.train import train_trl

    catalog, instances, domains, validation = load_inputs(config, paths.deps)
    with system_metrics():
        result = train_trl(config, instances, catalog=catalog, settings=settings, domains=domains, out_dir=out,
                           warm_start_dir=paths.outs.get("warm_start"), validation=validation)
    if config.log_checkpoint_artifact and mlflow.active_run() is not None:
        mlflow.log_artifacts(str(result.checkpoint), artifact_path="orchestrator")
    return result.metrics
