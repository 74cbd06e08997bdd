"""`orchestra train`: the `train` stage from the command line, with a backend, a step count and a dry run.

`orchestra train` runs the stage exactly as dvc.yaml does (the `train` section of params.yaml,
atomic outputs, an MLflow run), with `--backend` and `--steps` overriding the section. `--dry-run`
trains nothing: for `verl` it writes the run's inputs (parquet, tool and agent-loop YAML, the
flattened config), validates the composed configuration with verl's own validation and prints the
launch command; for `trl` it prints the plan (instances, warm start, GRPO steps, device).
`--reference PATH` writes the verl configuration composed from the section, as committed under
`infra/verl/` for review, and trains nothing (no data needed).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from orchestra_cli.app import app


def _section(params_file: Path, backend: str | None, steps: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from stagekit.runner import load_params_file

    all_params = load_params_file(params_file)
    section = dict(all_params.get("train") or {})
    if backend is not None:
        section["backend"] = backend
    effective = section.get("backend", "trl")
    if steps is not None:
        key, field = ("grpo", "steps") if effective == "trl" else ("verl", "total_training_steps")
        section[key] = {**(section.get(key) or {}), field: steps}
    return all_params, section


@app.command()
def train(
    backend: Annotated[str | None, typer.Option(help="trl (one machine) or verl (Ray cluster); default: params.yaml")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="GRPO steps (trl) or total training steps (verl)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="compose and validate, print the plan or command, train nothing")] = False,
    params: Annotated[Path, typer.Option(help="parameters file")] = Path("params.yaml"),
    reference: Annotated[Path | None, typer.Option(help="write the composed verl config here (as committed in "
                                                        "infra/verl/) and stop; needs no data")] = None,
) -> None:
    """Train the orchestrator (the `train` stage): SFT warm start + GRPO with TRL, or verl on Ray."""
    from stagekit.runner import run_stage, stage_module, validate_params
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.core.fs import atomic_write_text
    from toolorchestra.core.settings import load_settings

    if backend is not None and backend not in ("trl", "verl"):
        raise ConfigError(None, f"--backend must be trl or verl, got {backend!r}", key="backend")
    params = params.resolve()
    settings = load_settings(workspace=params.parent)
    all_params, section = _section(params, backend, steps)
    merged = {**all_params, "train": section}
    module = stage_module("train")
    stage_params = validate_params("train", module, merged, params)
    if reference is not None:
        from toolorchestra.rl.verl.compose import reference_yaml

        config = module.train_config(stage_params)
        atomic_write_text(reference, reference_yaml(config.verl, clip=config.grpo.clip_advantage,
                                                    min_std=config.grpo.min_std,
                                                    dead_band=config.grpo.dead_band.model_dump()))
        typer.echo(f"verl configuration valid; written to {reference}")
        return
    if dry_run:
        _dry_run(module, stage_params, settings)
        return
    if backend is None and steps is None:
        metrics = run_stage("train", params_file=params, settings=settings)
    else:
        overridden = settings.state / "cli" / "params-train.yaml"
        atomic_write_text(overridden, yaml.safe_dump(merged, sort_keys=False))
        metrics = run_stage("train", params_file=overridden, settings=settings)
    for key, value in sorted(metrics.items()):
        typer.echo(f"{key}: {value}")


def _dry_run(module: Any, stage_params: Any, settings: Any) -> None:
    config = module.train_config(stage_params)
    from stagekit.runner import existing_deps

    deps = existing_deps(stage_params, settings.workspace, "train")
    catalog, instances, domains, validation = module.load_inputs(config, deps)
    if config.backend == "verl":
        from toolorchestra.rl.verl.launch import prepare

        folder = settings.state / "verl" / config.verl.experiment_name
        run = prepare(config, instances, catalog=catalog, catalog_path=deps.get("catalog"), domains=domains,
                      settings=settings, folder=folder)
        typer.echo(f"verl configuration valid; inputs and flattened config in {folder}")
        typer.echo(shlex.join(run.command))
        return
    from toolorchestra.llm.local import resolve_device
    from toolorchestra.rl.train import select_instances, validation_instances

    chosen = select_instances(config, instances)
    validation = validation_instances(config, validation)
    kinds = {k: sum(i.kind == k for i in chosen) for k in ("tool_use", "qa")}
    typer.echo(f"backend: trl on {resolve_device(config.device)}; model: {config.init_from or config.base_model}")
    typer.echo(f"instances: {len(chosen)} ({kinds['tool_use']} tool-use, {kinds['qa']} QA)")
    typer.echo(f"warm start: {'SFT ' + str(config.sft.steps) + ' steps' if config.sft.enabled else 'off'}; "
               f"GRPO: {config.grpo.steps} steps x {config.grpo.prompts_per_step} group(s) of "
               f"{config.grpo.num_generations} rollouts, beta={config.grpo.beta}")
    if config.select.enabled and config.sft.enabled and validation:
        typer.echo(f"checkpoint choice: warm start or GRPO's policy, on {len(validation)} validation instance(s)")
    else:
        typer.echo("checkpoint choice: off (GRPO's policy is exported)" + (
            "" if validation or not config.select.enabled else "; the dataset has no validation split"))
    typer.echo(f"output: {stage_params.outs.get('model')}")
