"""`orchestra evaluate` and `orchestra promote`: the two stages from the command line.

`orchestra evaluate` runs the `evaluate` stage exactly as dvc.yaml does. `--model REF` evaluates a
registry reference (`models:/orchestrator@champion`) or a checkpoint folder instead of the
stage's model, and `--bench NAME` (repeatable) keeps only those benchmarks of
`evaluate.benchmarks`; with either, the report goes to `reports/eval-adhoc/` (stage outputs never
go into the state folder) so the pipeline's own output (`reports/eval`) keeps describing the
pipeline's model.

`orchestra promote` runs the `promote` stage as the flows do: in its own process, as the child of a
flow-level MLflow run tagged `promote` (so `orchestra lineage models:/NAME@ALIAS` works for what it
registers). It does not go through DVC, so `dvc.lock` does not record this run of the stage; use
`orchestra run --flow promote` for that. `--dry-run` shows the
gate's decision and the model card without registering anything or moving an alias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from orchestra_cli.app import app

CLI_REPORT = "reports/eval-adhoc"


def _evaluate_section(all_params: dict[str, Any], model: str | None, bench: list[str] | None) -> dict[str, Any]:
    from toolorchestra.core.errors import ConfigError

    section = dict(all_params.get("evaluate") or {})
    if model is not None:
        section["model"] = model
        section["deps"] = {k: v for k, v in (section.get("deps") or {}).items() if k != "model"}
    if bench:
        from pipelines.evaluate import Params

        declared = section.get("benchmarks")
        defaults = Params.model_fields["benchmarks"].default_factory()
        specs = declared if declared is not None else [b.model_dump() for b in defaults]
        known = [s.get("name") for s in specs]
        unknown = sorted(set(bench) - set(known))
        if unknown:
            raise ConfigError(None, f"--bench {unknown}: not in evaluate.benchmarks; known: {known}", key="bench")
        section["benchmarks"] = [s for s in specs if s.get("name") in set(bench)]
    if model is not None or bench:
        section["outs"] = {**(section.get("outs") or {}), "report": CLI_REPORT}
    return section


@app.command()
def evaluate(
    model: Annotated[str | None, typer.Option(
        help="models:/NAME@ALIAS, models:/NAME/VERSION or a checkpoint folder")] = None,
    bench: Annotated[list[str] | None, typer.Option(
        help="only this benchmark of evaluate.benchmarks (repeatable)")] = None,
    params: Annotated[Path, typer.Option(help="parameters file")] = Path("params.yaml"),
) -> None:
    """Evaluate the orchestrator against the baselines (the `evaluate` stage) and print the table."""
    from stagekit.runner import load_params_file, run_stage, stage_module, validate_params
    from toolorchestra.core.fs import atomic_write_text
    from toolorchestra.core.settings import load_settings

    params = params.resolve()
    settings = load_settings(workspace=params.parent)
    all_params = load_params_file(params)
    merged = {**all_params, "evaluate": _evaluate_section(all_params, model, bench)}
    stage_params = validate_params("evaluate", stage_module("evaluate"), merged, params)
    file = params
    if model is not None or bench:
        file = settings.state / "cli" / "params-evaluate.yaml"
        atomic_write_text(file, yaml.safe_dump(merged, sort_keys=False))
    metrics = run_stage("evaluate", params_file=file, settings=settings)
    report = settings.workspace / stage_params.outs["report"] / "report.md"
    if report.is_file():
        typer.echo(report.read_text(encoding="utf-8"))
    typer.echo(f"accuracy {metrics.get('accuracy', 0):.3f}, mean cost ${metrics.get('cost_mean', 0):.3g}, "
               f"mean latency {metrics.get('latency_mean', 0):.2f}s; report in {report.parent}")


@app.command()
def promote(
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="decide and show the card; register nothing, move no alias")] = False,
    params: Annotated[Path, typer.Option(help="parameters file")] = Path("params.yaml"),
) -> None:
    """Register the trained orchestrator as `challenger` and promote it to `champion` if it passes the gate."""
    import json
    import subprocess
    import sys

    from stagekit.runner import existing_deps, load_params_file, stage_module, validate_params
    from stagekit.tracking import flow_run
    from toolorchestra.core.settings import load_settings

    params = params.resolve()
    settings = load_settings(workspace=params.parent)
    stage_params = validate_params("promote", stage_module("promote"), load_params_file(params), params)
    if dry_run:
        from toolorchestra.registry.promotion import plan_promotion, render_card

        deps = existing_deps(stage_params, settings.workspace, "promote")
        plan = plan_promotion(stage_params, model=deps["model"], report_dir=deps["report"],
                              workspace=settings.workspace, settings=settings)
        typer.echo(render_card(stage_params, plan, version=None, run_id=None))
        typer.echo(plan.summary)
        typer.echo(f"dry run: would be {plan.label}; nothing registered, no alias moved")
        return
    # As in the flow, the stage runs in its own process as a child run of the flow-level run.
    with flow_run(settings, "promote"):
        # `python -m orchestra_cli.main` would get a second, empty `app`: call main() of the package's module.
        entry = "import sys; from orchestra_cli.main import main; sys.exit(main())"
        proc = subprocess.run([sys.executable, "-c", entry, "stage", "promote", "--params", str(params)],
                              cwd=settings.workspace, check=False)
    if proc.returncode != 0:
        raise typer.Exit(proc.returncode)
    decision = json.loads((settings.workspace / stage_params.outs["card"] / "decision.json").read_text())
    typer.echo(f"{decision['decision']}: version {decision['version'] or '-'} of {decision['registered_model']}"
               f" (candidate accuracy {decision['candidate']['accuracy']:.3f})")
    if decision.get("summary"):
        typer.echo(decision["summary"])
    for reason in decision["reasons"]:
        typer.echo(f"  {reason}")
