"""Fixtures for the server tests: a scripted orchestrator policy served on loopback."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from helpers.serve_fixtures import Calculator, served_calculator

from toolorchestra.llm.base import LLM


@pytest.fixture
def settings(tmp_path):
    from toolorchestra.core.settings import Settings

    return Settings(workspace=tmp_path, state_dir=tmp_path / ".orchestra",
                    mlflow={"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                            "artifact_root": (tmp_path / "artifacts").as_uri()})


@pytest.fixture
def serve(settings):
    """`with serve(policy, **config) as (url, served): ...`: the policy behind a real server."""
    from toolorchestra.serving.app import create_app
    from toolorchestra.serving.config import ServeConfig
    from toolorchestra.serving.metrics import ServeMetrics
    from toolorchestra.serving.models import ModelPool
    from toolorchestra.serving.server import BackgroundServer

    @contextmanager
    def run(policy: LLM | None = None, *, default_vector=None, on_trajectory=None, **config):
        served = served_calculator(policy or Calculator(), settings, default_vector=default_vector)
        serve_config = ServeConfig(**config)
        metrics = ServeMetrics()
        pool = ModelPool(serve_config, settings, loader=lambda ref: served, on_batch=metrics.on_batch)
        pool.get("")
        app = create_app(serve_config, pool, metrics=metrics, on_trajectory=on_trajectory)
        with BackgroundServer(app) as url:
            yield url, served

    return run
