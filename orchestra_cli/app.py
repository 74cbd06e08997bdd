"""The `orchestra` Typer app that every command module registers its commands on."""

from __future__ import annotations

import typer
from rich.console import Console

err_console = Console(stderr=True)
"""Where commands print one-line errors."""

app = typer.Typer(
    name="orchestra",
    help="Train and ship tool orchestrators (ToolOrchestra) as an MLOps pipeline.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
