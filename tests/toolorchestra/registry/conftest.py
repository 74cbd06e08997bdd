"""Fixtures for the registry tests: MLflow on a temporary SQLite store and tiny-model checkpoints."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.eval_fixtures import make_checkpoint, save_tiny_model, tiny_catalog_data


def mlflow_settings_in(root: Path):
    """Settings whose MLflow tracking (SQLite) and artifacts live under `root`."""
    from toolorchestra.core.settings import Settings

    return Settings(workspace=root, state_dir=root / ".orchestra",
                    mlflow={"tracking_uri": f"sqlite:///{root / 'mlflow.db'}",
                            "artifact_root": (root / "artifacts").as_uri()})


@pytest.fixture
def mlflow_settings(tmp_path):
    return mlflow_settings_in(tmp_path)


@pytest.fixture(scope="module")
def module_mlflow_settings(tmp_path_factory):
    return mlflow_settings_in(tmp_path_factory.mktemp("mlflow"))


@pytest.fixture(scope="session")
def tiny_dir(tiny_llm, tmp_path_factory) -> Path:
    return save_tiny_model(tiny_llm, tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def checkpoint(tiny_llm, tiny_dir, tmp_path_factory) -> Path:
    """A checkpoint whose catalog has only the code interpreter (nothing slow loads when served)."""
    data = tiny_catalog_data(tiny_dir)
    data["tools"] = [t for t in data["tools"] if t["name"] == "code_interpreter"]
    return make_checkpoint(tiny_llm, tmp_path_factory.mktemp("ckpt") / "orchestrator", base_model=tiny_dir,
                           catalog_data=data)
