"""Prepare, validate and launch a verl run; merge its final actor into an orchestrator checkpoint.

`prepare(config, instances, ...)` writes everything verl needs into a folder: the parquet data,
the tool-config YAML (our `BaseTool` adapters), the agent-loop YAML registering `orchestra_agent`
with the catalog, data roots and episode settings, and the flattened resolved config for
reference; composes the Hydra overrides and validates them with verl's own validation. It needs
no GPU: `orchestra train --backend verl --dry-run` stops there and prints the command.

`train_verl(...)` then runs `python -m verl.trainer.main_ppo <overrides>` (on the Ray cluster named
by `RAY_ADDRESS` / `train.verl.ray_address`, else a local one; or through `ray job submit` with
`train.verl.submit: job`), with MLflow pointed at the project's tracking server, and merges the
last actor checkpoint to safetensors with verl's model merger into the output folder, beside the
catalog and manifest, so evaluation loads it like a TRL-trained one.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.fs import atomic_write_text
from toolorchestra.core.settings import Settings
from toolorchestra.episodes.instance import DomainLocator, Instance
from toolorchestra.episodes.rows import write_verl_parquet
from toolorchestra.rl.config import TrainConfig
from toolorchestra.rl.verl import compose as verl_compose
from toolorchestra.rl.verl.data import AGENT_NAME, collect_specs, tool_config
from toolorchestra.tools.catalog import Catalog


@dataclass
class PreparedRun:
    folder: Path
    files: verl_compose.VerlFiles
    overrides: list[str]
    command: list[str]
    config: Any


def prepare(config: TrainConfig, instances: list[Instance], *, catalog: Catalog, catalog_path: Path | None,
            domains: DomainLocator, settings: Settings, folder: Path, llm_for: Any = None) -> PreparedRun:
    """Write the run's inputs into `folder`, compose and validate (see the module docstring)."""
    from toolorchestra.episodes.environment import RolloutEnvironment
    from toolorchestra.rl.train import select_instances

    instances = select_instances(config, instances)
    folder.mkdir(parents=True, exist_ok=True)
    env = RolloutEnvironment(catalog, settings, domains, config.episode, llm_for=llm_for)
    offered = [env.setup(instance).specs for instance in instances]
    files = verl_compose.VerlFiles(train=folder / "train.parquet", val=folder / "val.parquet",
                                   tool_config=folder / "tools.yaml", agent_loops=folder / "agent_loops.yaml",
                                   checkpoints=folder / "checkpoints")
    # The agent loop rebuilds each episode's tools from its row (`env.setup`, the same cap).
    write_verl_parquet(instances, files.train, agent_name=AGENT_NAME)
    write_verl_parquet(instances[: max(1, min(len(instances), config.verl.train_batch_size))], files.val,
                       agent_name=AGENT_NAME)
    atomic_write_text(files.tool_config, yaml.safe_dump(tool_config(collect_specs(offered)), sort_keys=False))
    if catalog_path is None:  # the embedded catalog: write it so workers load the same one
        import json

        from toolorchestra.rl.checkpoint import catalog_dict

        catalog_path = folder / "catalog.json"
        atomic_write_text(catalog_path, json.dumps(catalog_dict(catalog, folder), indent=2))
    loops = [{
        "name": AGENT_NAME, "_target_": "toolorchestra.rl.verl.agent_loop.OrchestraAgentLoop",
        "catalog": str(Path(catalog_path).resolve()), "data_roots": [str(r.resolve()) for r in domains.roots],
        "episode": {**config.episode.model_dump(mode="json"), "max_turns": config.verl.max_turns,
                    "max_observation_chars": config.verl.max_tool_response_length},
    }]
    atomic_write_text(files.agent_loops, yaml.safe_dump(loops, sort_keys=False))
    address = config.verl.ray_address or os.environ.get("RAY_ADDRESS") or settings.ray_address
    hydra_overrides = verl_compose.overrides(config.verl, files, clip=config.grpo.clip_advantage,
                                             min_std=config.grpo.min_std,
                                             dead_band=config.grpo.dead_band.model_dump(), ray_address=address)
    composed = verl_compose.compose(hydra_overrides)
    verl_compose.validate(composed)
    atomic_write_text(folder / "ppo_orchestra.yaml", verl_compose.flatten_yaml(composed))
    cmd = verl_compose.command(hydra_overrides, submit=config.verl.submit, ray_address=address,
                               working_dir=str(settings.workspace) if config.verl.submit == "job" else None)
    return PreparedRun(folder=folder, files=files, overrides=hydra_overrides, command=cmd, config=composed)


def last_actor(checkpoints: Path) -> Path:
    steps = sorted((int(p.name.split("_")[-1]), p) for p in checkpoints.glob("global_step_*") if p.name.split("_")[-1].isdigit())
    if not steps:
        raise OrchestraError(f"verl wrote no checkpoint under {checkpoints}; set train.verl.save_freq")
    actor = steps[-1][1] / "actor"
    if not actor.is_dir():
        raise OrchestraError(f"{steps[-1][1]} has no actor checkpoint")
    return actor


def train_verl(config: TrainConfig, instances: list[Instance], *, catalog: Catalog, domains: DomainLocator,
               settings: Settings, out_dir: Path, catalog_path: Path | None = None) -> dict[str, float]:
    """Launch verl and export the merged actor into `out_dir` (a checkpoint folder)."""
    from toolorchestra.core.fs import atomic_write_json
    from toolorchestra.rl.checkpoint import CATALOG, FORMAT, MANIFEST, catalog_dict

    folder = settings.state / "verl" / config.verl.experiment_name
    run = prepare(config, instances, catalog=catalog, catalog_path=catalog_path, domains=domains,
                  settings=settings, folder=folder)
    env = {**os.environ, "MLFLOW_TRACKING_URI": settings.tracking_uri, "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run(run.command, env=env, cwd=settings.workspace, check=False)
    if result.returncode != 0:
        raise OrchestraError(f"verl training failed with exit code {result.returncode}: {' '.join(run.command[:4])} ...")
    actor = last_actor(run.files.checkpoints)
    merge = ["python", "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
             "--target_dir", str(out_dir)]
    if subprocess.run(merge, env=env, check=False).returncode != 0:
        raise OrchestraError(f"merging {actor} failed: {' '.join(merge)}")
    atomic_write_json(out_dir / CATALOG, catalog_dict(catalog, out_dir))
    atomic_write_json(out_dir / MANIFEST, {"format": FORMAT, "name": "orchestrator", "backend": "verl",
                                           "base_model": config.verl.model, "episode": config.episode.model_dump(mode="json"),
                                           "policy_alias": config.episode.policy_alias or catalog.policy,
                                           "verl_checkpoint": str(actor)})
    return {"instances": float(len(instances)), "verl/steps": float(actor.parent.name.split("_")[-1])}

