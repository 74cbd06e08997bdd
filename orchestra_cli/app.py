"""The `orchestra` Typer app that every command module registers its commands on."""

from __future__ import annotations

from enum import Enum

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


class Engine(str, Enum):
    """`--engine` of the commands that run a fixed policy (`toolorchestra.llm.config.pick_engine`)."""

    auto = "auto"
    transformers = "transformers"
    llamacpp = "llamacpp"


ENGINE_HELP = "engine of the policy and the catalog's local experts: auto = llama.cpp on a CPU, transformers on a GPU"
