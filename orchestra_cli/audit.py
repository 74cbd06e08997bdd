"""`orchestra lineage` and `orchestra runs`: what made a model, and how runs compare."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from orchestra_cli.app import app

# Default columns: per-stage metrics (logged on the flow run as `<stage>.<metric>`) whose name
# starts with one of these.
DEFAULT_METRIC_HINTS = ("reward", "accuracy", "cost", "latency", "tasks_kept", "success")


@app.command()
def lineage(
    ref: Annotated[str, typer.Argument(help="models:/NAME@ALIAS, models:/NAME/VERSION, or an MLflow run id")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Trace a model or run back to its flow run, git commit, stage parameters and data hashes."""
    from stagekit.lineage import lineage as trace
    from toolorchestra.core.settings import load_settings

    info = trace(ref, load_settings())
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    from rich.console import Console
    from rich.tree import Tree

    flow = info["flow_run"]
    root = Tree(f"[bold]{ref}[/]")
    if info["model"]:
        m = info["model"]
        root = root.add(f"model {m['name']} v{m['version']} aliases={m['aliases']} run={m['run_id']}")
    node = root.add(f"flow run {flow['run_id']} ({flow['flow']}, prefect {flow['prefect_flow_run_id']})")
    node = node.add(f"git commit {flow['git_commit']}{' (dirty)' if flow['git_dirty'] else ''}, dvc.lock md5 {flow['dvc_lock_md5']}")
    for stage in info["stages"]:
        s = node.add(f"stage [bold]{stage['stage']}[/] run={stage['run_id']} {stage['status']}")
        if stage["params"]:
            s.add("params: " + ", ".join(f"{k}={v}" for k, v in list(stage["params"].items())[:12]))
        for dep in stage["deps"]:
            s.add(f"in  {dep['path']}  md5={dep['md5']}")
        for out in stage["outs"]:
            s.add(f"out {out['path']}  md5={out['md5']}")
    fetch = root.add("fetch exactly this data:")
    for command in info["fetch"]:
        fetch.add(command)
    Console().print(root)


@app.command()
def runs(
    experiment: Annotated[str | None, typer.Option(help="MLflow experiment (default: settings)")] = None,
    metric: Annotated[list[str] | None, typer.Option(help="metric column (repeatable); default: reward/accuracy/cost/latency/kept")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 20,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Flow runs, newest first, with their key metrics."""
    import mlflow

    from stagekit.tracking import configure
    from toolorchestra.core.errors import OrchestraError
    from toolorchestra.core.settings import load_settings

    settings = load_settings()
    configure(settings)
    name = experiment or settings.mlflow.experiment
    exp = mlflow.get_experiment_by_name(name)
    if exp is None:
        raise OrchestraError(f"no MLflow experiment {name!r} at {settings.tracking_uri}")
    found = mlflow.search_runs([exp.experiment_id], filter_string="tags.`orchestra.flow` != ''",
                               order_by=["attributes.start_time DESC"], max_results=limit, output_format="list")
    rows = [{
        "run_id": r.info.run_id,
        "flow": r.data.tags.get("orchestra.flow"),
        "status": r.info.status,
        "start_time": r.info.start_time,
        "git_commit": r.data.tags.get("git.commit", "")[:10],
        "metrics": dict(r.data.metrics),
    } for r in found]
    if metric:
        columns = list(metric)
    else:
        keys = sorted({k for row in rows for k in row["metrics"]})
        columns = [k for k in keys if k.split(".", 1)[-1].startswith(DEFAULT_METRIC_HINTS)]
    if as_json:
        typer.echo(json.dumps([{**row, "metrics": {k: row["metrics"].get(k) for k in (columns or row["metrics"])}} for row in rows], indent=2))
        return
    from datetime import datetime

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"flow runs in {name}")
    for column in ("run_id", "flow", "status", "started", "commit", *columns):
        table.add_column(column)
    for row in rows:
        started = datetime.fromtimestamp(row["start_time"] / 1000).strftime("%Y-%m-%d %H:%M")
        values = [f"{row['metrics'][c]:.4g}" if c in row["metrics"] else "" for c in columns]
        table.add_row(row["run_id"], row["flow"], row["status"], started, row["git_commit"], *values)
    Console(width=max(120, 24 * (len(columns) + 5))).print(table)
