"""A requested stop (Ctrl-C, SIGTERM) is not a crash: one exception type for both, so every layer
can tell them apart from failures (the stage runner records `killed`, MLflow runs end KILLED, the
flow does not retry).

`Stopped` subclasses KeyboardInterrupt, so code that already cleans up on Ctrl-C cleans up on
SIGTERM too; `stop_on_signals()` makes SIGTERM (and SIGINT) raise it in the main thread (Python's default for
SIGTERM is to die at once, skipping every `finally`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

RUN_TOKEN_ENV = "ORCHESTRA_RUN_TOKEN"
"""Set by `orchestra run` for everything it starts; the MLflow runs opened under it carry it as the
tag `RUN_TOKEN_TAG`, so its watchdog can end them KILLED after a SIGKILL."""
RUN_TOKEN_TAG = "orchestra.run_token"

_requested: list[int] = []
"""The signals of the stops raised in this process (click turns a KeyboardInterrupt into a plain
exit status 130, so the CLI asks here what happened)."""


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by a signal."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = int(signum)
        _requested.append(self.signum)
        super().__init__(f"stopped by {signal_name(self.signum)}")

    def __reduce__(self):
        return (type(self), (self.signum,))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def stop_signal(exc: BaseException) -> int:
    """The signal a stop came from: SIGINT for a plain KeyboardInterrupt."""
    return exc.signum if isinstance(exc, Stopped) else int(signal.SIGINT)


def exit_code(exc: BaseException) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (130, 143)."""
    return 128 + stop_signal(exc)


def forget_stops() -> None:
    """Start a new command with no stop recorded (the CLI's `main` may run several in one process)."""
    _requested.clear()


def requested_stop() -> int | None:
    """The signal of the first stop raised in this process, None if there was none."""
    return _requested[0] if _requested else None


@contextlib.contextmanager
def stops_prevail() -> Iterator[None]:
    """Raise the stop, not the error, when the body fails after a stop was raised in it: code that a
    stop interrupts may raise another error while it cleans up (sqlite's "database is locked" from
    the rollback of an MLflow write the signal cut short), and a stop must not pass for a crash
    (the flow retries crashes)."""
    before = len(_requested)
    try:
        yield
    except Exception as exc:
        if len(_requested) > before:
            raise Stopped(_requested[before]) from exc
        raise


def stop_on_signals(before: Callable[[int], None] | None = None) -> None:
    """Make SIGTERM and SIGINT raise `Stopped` in the main thread (a no-op elsewhere);
    `before(signum)` runs first (e.g. to pass the signal on to child processes)."""
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        # One stop per process: a second signal (a forwarded copy, a second Ctrl-C) must not
        # interrupt the cleanup the first one started; SIGKILL remains for a stuck process.
        for other in (signal.SIGTERM, signal.SIGINT):
            signal.signal(other, signal.SIG_IGN)
        if before is not None:
            before(signum)
        raise Stopped(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)
