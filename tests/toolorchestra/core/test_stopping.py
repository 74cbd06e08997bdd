"""Stops are not crashes (core/stopping.py): SIGTERM raises `Stopped` like Ctrl-C, once."""

from __future__ import annotations

import os
import pickle
import signal
import time

import pytest

from toolorchestra.core import stopping
from toolorchestra.core.stopping import Stopped, exit_code, requested_stop, stop_on_signals


@pytest.fixture
def restore_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    stopping._requested.clear()


def test_sigterm_raises_stopped_once_and_is_recorded(restore_handlers):
    seen = []
    stop_on_signals(before=seen.append)
    with pytest.raises(Stopped) as info:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this
    assert info.value.signum == signal.SIGTERM and str(info.value) == "stopped by SIGTERM"
    assert seen == [signal.SIGTERM] and requested_stop() == signal.SIGTERM
    os.kill(os.getpid(), signal.SIGINT)  # a second signal is ignored: the first cleanup goes on
    time.sleep(0.05)
    assert exit_code(info.value) == 143 and exit_code(KeyboardInterrupt()) == 130


def test_stopped_is_a_keyboard_interrupt_and_pickles(restore_handlers):
    exc = pickle.loads(pickle.dumps(Stopped(signal.SIGINT)))
    assert isinstance(exc, KeyboardInterrupt) and exc.signum == signal.SIGINT
