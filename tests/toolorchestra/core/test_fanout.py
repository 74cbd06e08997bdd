"""`fan_out` without a cluster: backend choice, order, exceptions, fast failure on a bad address.

The Ray path against a real `ray start --head` cluster is in tests/cluster/test_ray_fanout.py.
"""

from __future__ import annotations

import socket
import time
from functools import partial

import pytest

from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.fanout import backend, fan_out, resolve_address


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_backend_choice(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert backend(None) == "serial" and resolve_address("") is None and resolve_address("  ") is None
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert backend(None) == "ray" and resolve_address(None) == "10.0.0.1:6379"
    assert resolve_address("head:6379") == "head:6379"  # the settings' address wins over RAY_ADDRESS


def test_serial_path_keeps_order_and_raises_the_items_exception(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert fan_out(partial(pow, 2), [3, 1, 2]) == [8, 2, 4]
    assert fan_out(str, (i for i in range(3))) == ["0", "1", "2"]  # any iterable
    with pytest.raises(ZeroDivisionError):
        fan_out(lambda x: 1 / x, [1, 0])


def test_nothing_to_fan_out_connects_to_nothing():
    assert fan_out(str, [], ray_address=f"127.0.0.1:{_closed_port()}") == []


def test_an_unreachable_cluster_fails_in_seconds_with_the_fix():
    started = time.perf_counter()
    with pytest.raises(OrchestraError, match=r"unreachable.*ray start --head.*unset RAY_ADDRESS"):
        fan_out(str, [1], ray_address=f"127.0.0.1:{_closed_port()}")
    assert time.perf_counter() - started < 5  # Ray's own connection retries take minutes
