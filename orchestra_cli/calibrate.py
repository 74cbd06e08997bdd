"""`orchestra calibrate --budget USD`: the served model's default cost preference for a budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestra_cli.app import ENGINE_HELP, Engine, app


@app.command()
def calibrate(
    budget: Annotated[float, typer.Option(min=0.0, help="mean cost per task to meet, USD")],
    model: Annotated[str, typer.Option(help="registered model to calibrate")] = "models:/orchestrator@champion",
    tasks: Annotated[Path, typer.Option(help="QA JSONL file, or a folder with qa/*.jsonl")] = Path("data/validated"),
    max_tasks: Annotated[int, typer.Option(min=1, help="calibration tasks used (small: it runs on the CPU)")] = 8,
    weights: Annotated[str, typer.Option(help="comma-separated preference weights on cost to sweep")] = "0,0.5,1,2",
    max_turns: Annotated[int, typer.Option(min=1)] = 3,
    dry_run: Annotated[bool, typer.Option(help="print the curve and the choice; record nothing")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    engine: Annotated[Engine, typer.Option(help=ENGINE_HELP)] = Engine.auto,
) -> None:
    """Sweep the cost weight on calibration tasks, print the accuracy-cost curve, record the choice."""
    from rich.console import Console
    from rich.table import Table

    from toolorchestra.core.errors import ConfigError
    from toolorchestra.core.settings import load_settings
    from toolorchestra.llm.config import pick_engine
    from toolorchestra.registry.policy import load_registered
    from toolorchestra.serving.calibrate import calibrate as run_calibration
    from toolorchestra.serving.calibrate import load_tasks, record
    from toolorchestra.serving.models import served_from

    try:
        sweep = [float(w) for w in weights.split(",") if w.strip()]
    except ValueError:
        raise ConfigError(None, f"not a comma-separated list of numbers: {weights!r}", key="weights") from None
    settings = load_settings()
    folder = tasks if tasks.is_absolute() else settings.workspace / tasks
    items = load_tasks(folder, max_tasks)
    local_engine = pick_engine(engine.value)
    served = served_from(load_registered(model, settings, engine=local_engine), settings, engine=local_engine)
    result = run_calibration(served, items, budget, sweep, max_turns=max_turns)
    run_id = record(result, served, settings) if result.chosen is not None and not dry_run else None
    if as_json:
        typer.echo(json.dumps({**result.model_dump(mode="json"), "accuracy_lost": result.accuracy_lost,
                               "model_version": served.registered.ref, "run_id": run_id}))
    else:
        table = Table(title=f"accuracy vs cost on {result.tasks} tasks ({served.registered.ref})")
        for column in ("cost weight", "accuracy", "mean cost / task (USD)", "mean latency (s)", f"<= ${budget:g}"):
            table.add_column(column)
        for p in result.curve:
            mark = "chosen" if result.chosen is not None and p.cost_weight == result.chosen.cost_weight else ""
            table.add_row(f"{p.cost_weight:g}", f"{p.accuracy:.3f}", f"{p.mean_cost_usd:.6f}", f"{p.mean_latency_s:.2f}",
                          f"{'yes' if p.meets_budget else 'no'} {mark}".strip())
        Console().print(table)
        if result.chosen is not None:
            typer.echo(f"chosen: cost weight {result.chosen.cost_weight:g} ({result.chosen.preference or 'no preference'}), "
                       f"accuracy lost {result.accuracy_lost:.3f}"
                       + (f"; recorded in run {run_id} and as the served default of {served.registered.ref}" if run_id else ""))
    if result.chosen is None:
        cheapest = min(result.curve, key=lambda p: p.mean_cost_usd)
        typer.echo(f"no setting meets ${budget:g} per task: the cheapest (weight {cheapest.cost_weight:g}) costs "
                   f"${cheapest.mean_cost_usd:.6f}; nothing recorded (a per-request budget_usd still caps spending)",
                   err=True)
        raise typer.Exit(1)
