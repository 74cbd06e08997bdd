"""Entry point of the `orchestra` command.

Each command group lives in its own module and registers itself on `app` (`orchestra_cli.app`);
heavy libraries are imported inside the commands so `orchestra --help` stays fast. Errors derived
from `OrchestraError` are printed as one line (no traceback) with exit code 2.
"""

from __future__ import annotations

import typer

from orchestra_cli import (
    ask,
    audit,
    calibrate,
    descpref,
    doctor,
    evalpromote,
    run,
    serve_model,
    stage,
    toolscale,
    train,
)
from orchestra_cli.app import app, err_console
from toolorchestra.core.errors import OrchestraError

COMMAND_MODULES = (ask, audit, calibrate, descpref, doctor, evalpromote, run, serve_model, stage, toolscale, train)
"""Each registered its commands on `app` when imported."""


def main(argv: list[str] | None = None) -> int:
    try:
        # Without standalone mode click returns a command's `typer.Exit` code instead of exiting.
        code = app(args=argv, standalone_mode=False)
        if isinstance(code, int):
            return code
    except OrchestraError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        return 2
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err_console.print("aborted")
        return 130
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            return exc.exit_code
        raise
    return 0

