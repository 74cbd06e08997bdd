"""Entry point of the `orchestra` command.

Each command group lives in its own module and registers itself on `app` (`orchestra_cli.app`);
heavy libraries are imported inside the commands so `orchestra --help` stays fast. Errors derived
from `OrchestraError` are printed as one line (no traceback) with exit code 2; a stop (Ctrl-C,
SIGTERM) is one line too, with the shell's exit code for the signal (130, 143).
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


def _stopped(exc: BaseException) -> int:
    """Ctrl-C, or SIGTERM as `Stopped`: a requested stop, one line and no traceback."""
    from toolorchestra.core.stopping import exit_code, signal_name, stop_signal

    err_console.print(f"[bold red]stopped[/] by {signal_name(stop_signal(exc))}", highlight=False)
    return exit_code(exc)


def main(argv: list[str] | None = None) -> int:
    import signal

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _main(argv)
    finally:  # a caller that runs commands in-process (tests) gets its own handlers back
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def _main(argv: list[str] | None) -> int:
    from toolorchestra.core.stopping import Stopped, forget_stops, requested_stop, stop_on_signals

    forget_stops()
    stop_on_signals()  # SIGTERM unwinds like Ctrl-C: every `finally` runs (commands may refine this)
    try:
        # Without standalone mode click returns a command's `typer.Exit` code instead of exiting
        # (and a KeyboardInterrupt as 130).
        code = app(args=argv, standalone_mode=False)
        if requested_stop() is not None:
            return _stopped(Stopped(requested_stop()))
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
    except KeyboardInterrupt as exc:
        return _stopped(exc)
    except Exception as exc:  # click usage errors carry their own exit code
        import click

        # typer >= 0.29 raises its own vendored click's exceptions (a `typer.TyperException`)
        if isinstance(exc, click.ClickException | typer.TyperException) and hasattr(exc, "show"):
            exc.show()
            return exc.exit_code
        raise
    return 0

