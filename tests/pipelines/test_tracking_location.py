"""Where a new MLflow experiment keeps its artifacts, per profile."""

from __future__ import annotations

from stagekit.tracking import artifact_location
from toolorchestra.core.settings import MlflowSettings, Settings


def test_local_store_uses_the_state_folder(tmp_path):
    settings = Settings(workspace=tmp_path)
    assert artifact_location(settings) == (tmp_path / ".orchestra" / "mlartifacts").as_uri()


def test_tracking_server_uses_its_own_artifact_store(tmp_path):
    # None: the server's --artifacts-destination (proxied), never a folder of this machine
    settings = Settings(workspace=tmp_path, mlflow=MlflowSettings(tracking_uri="http://mlflow:5000"))
    assert artifact_location(settings) is None


def test_an_explicit_root_wins(tmp_path):
    settings = Settings(workspace=tmp_path, mlflow=MlflowSettings(tracking_uri="http://mlflow:5000",
                                                                  artifact_root="s3://bucket/mlflow"))
    assert artifact_location(settings) == "s3://bucket/mlflow"
