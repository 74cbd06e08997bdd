"""`orchestra stage NAME`: run one pipeline stage (what dvc.yaml calls)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestra_cli.app import app


@app.command()
def stage(
    name: Annotated[str, typer.Argument(help="stage name: a module pipelines/<name>.py")],
    params: Annotated[Path, typer.Option(help="parameters file")] = Path("params.yaml"),
) -> None:
    """Run one stage with its params.yaml section; outputs are moved into place atomically."""
    from stagekit.runner import run_stage

    metrics = run_stage(name, params_file=params)
    for key, value in sorted(metrics.items()):
        typer.echo(f"{key}: {value}")
