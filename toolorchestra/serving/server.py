"""The app `orchestra serve-model` runs: the model pool with the default model loaded up front
(a missing alias fails at start-up, not at the first request) and sampled MLflow traces."""

from __future__ import annotations

import random
from typing import Any

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.core.settings import Settings
from toolorchestra.serving.app import create_app
from toolorchestra.serving.config import ServeConfig
from toolorchestra.serving.metrics import ServeMetrics
from toolorchestra.serving.models import ModelPool, ServedModel


def trace_sampler(config: ServeConfig, settings: Settings, *, rng: random.Random | None = None,
                  experiment: str = "orchestra-serve"):
    """Logs a finished request as an MLflow trace (experiment `orchestra-serve`) when it asks for
    one (`orchestra.trace: true`), or at the configured rate unless it asks not to."""
    from toolorchestra.registry.store import client_for
    from toolorchestra.tracing.trajectory import experiment_id_for, log_trajectory_trace

    rng = rng or random.Random()
    experiment_id: list[str] = []  # resolved at the first sampled request

    def on_trajectory(trajectory: Trajectory, meta: dict[str, Any]) -> None:
        wanted = meta.get("trace")
        if wanted is False or (wanted is None and rng.random() >= config.trace_sample_rate):
            return
        if not experiment_id:
            client_for(settings)
            experiment_id.append(experiment_id_for(experiment))
        log_trajectory_trace(trajectory, name="serve", experiment_id=experiment_id[0],
                             tags={"orchestra.model_version": str(meta.get("model_version")),
                                   "orchestra.preference_source": str(meta.get("preference_source"))})

    return on_trajectory


def build_app(config: ServeConfig, settings: Settings, *, pool: ModelPool | None = None) -> tuple[Any, ServedModel]:
    metrics = ServeMetrics()
    pool = pool or ModelPool(config, settings, on_batch=metrics.on_batch)
    served = pool.get("")
    return create_app(config, pool, on_trajectory=trace_sampler(config, settings), metrics=metrics), served


class BackgroundServer:
    """The app served by uvicorn in a thread of this process (benchmarks, tests, notebooks):
    `with BackgroundServer(app) as url: ...` binds loopback on a free port and stops on exit."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                     server_header=False, lifespan="on"))
        self._thread: Any = None

    def __enter__(self) -> str:
        import threading
        import time

        self._thread = threading.Thread(target=self._server.run, name="uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)
