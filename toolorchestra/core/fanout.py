"""Map a function over independent items: serially, or on a Ray cluster, with the same results.

    results = fan_out(partial(work, seed=0), items, ray_address=settings.ray_address)

Which backend runs is configuration, never a code fork:
- `ray_address` (the caller passes `settings.ray_address`, i.e. `ORCHESTRA_RAY_ADDRESS`), else the
  `RAY_ADDRESS` environment variable: run each item as a Ray task on that cluster
  (`host:port` of a head started with `ray start --head`, `ray://host:10001`, or `auto`);
- `local`: a private Ray instance on this machine (`ray.init()`), stopped afterwards;
- neither: a plain loop in this process.

Results come back in the order of `items` whatever the backend, and an item's exception is raised
in the caller as itself (Ray's `RayTaskError` is an instance of the original class), so callers
cannot tell the backends apart except by speed. (An exception whose class cannot be pickled
arrives as an `OrchestraError` carrying its message.) `fn` must not depend on process state (globals,
environment variables): on Ray it runs in worker processes, possibly on other machines, which
need this package installed (the cluster image does) but not the caller's files.

Ray is imported only when it is used (it costs seconds at import).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from toolorchestra.core.errors import OrchestraError

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)

LOCAL = "local"


def resolve_address(ray_address: str | None = None) -> str | None:
    """The Ray cluster to use: the explicit address, else `RAY_ADDRESS`, else None (serial)."""
    address = (ray_address or os.environ.get("RAY_ADDRESS") or "").strip()
    return address or None


def backend(ray_address: str | None = None) -> Literal["serial", "ray"]:
    return "ray" if resolve_address(ray_address) else "serial"


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)


def _check_reachable(address: str) -> None:
    """Fail in seconds with the fix, instead of Ray's long connection retries."""
    from toolorchestra.core.services import ray_reachability

    found = ray_reachability(address, timeout_s=3.0)
    if not found.ok:
        raise OrchestraError(
            f"Ray cluster {address!r} is unreachable ({found.detail}): start it (`ray start --head`) "
            "or unset RAY_ADDRESS / ORCHESTRA_RAY_ADDRESS to run serially"
        )


def fan_out(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    ray_address: str | None = None,
    num_cpus: float = 1.0,
    runtime_env: dict[str, Any] | None = None,
) -> list[R]:
    """`[fn(item) for item in items]`, each call a Ray task when a cluster is configured.

    `num_cpus` is what each task reserves on the cluster; `runtime_env` is passed to `ray.init`
    (e.g. `{"env_vars": {...}}`) when this call starts the connection.
    """
    items = list(items)
    address = resolve_address(ray_address)
    if address is None or not items:
        return [fn(item) for item in items]

    connected = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    if not connected and address not in (LOCAL, "auto"):
        _check_reachable(address)  # before importing Ray: a typo fails in milliseconds

    import ray

    started = False
    if not connected:
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING,
                 **({"include_dashboard": False} if address == LOCAL else {}))
        started = True
    try:
        # A worker that dies is retried by Ray (items are independent and deterministic); an
        # exception raised by `fn` is not.
        remote = ray.remote(num_cpus=num_cpus)(_call)
        # One copy of the function in the object store, shared by every task.
        fn_ref = ray.put(fn)
        refs = [remote.remote(fn_ref, item) for item in items]
        log.info("fan-out: %d task(s) on Ray at %s", len(refs), address)
        try:
            return list(ray.get(refs))  # ray.get keeps the order of `refs`
        except ray.exceptions.UnserializableException as exc:
            # The task's exception could not be rebuilt here (its class does not pickle, e.g. one
            # whose __init__ takes other arguments than its message): keep its last line.
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            raise OrchestraError(f"a fan-out task failed: {lines[-1] if lines else exc}") from None
    finally:
        if started:
            ray.shutdown()
