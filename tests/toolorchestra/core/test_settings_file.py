"""A settings file (ORCHESTRA_SETTINGS_FILE) shared with other tools: infra/cluster.env carries
PREFECT_API_URL, MLFLOW_* and AWS_* lines too; only ORCHESTRA_* lines are settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from toolorchestra.core.settings import load_settings


@pytest.fixture
def settings_file(tmp_path, monkeypatch):
    for key in [k for k in __import__("os").environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    path = tmp_path / "cluster.env"
    monkeypatch.setenv("ORCHESTRA_SETTINGS_FILE", str(path))
    return path


def test_other_tools_lines_are_ignored(settings_file, tmp_path):
    settings_file.write_text(
        "ORCHESTRA_PROFILE=cluster\nORCHESTRA_MLFLOW__TRACKING_URI=http://mlflow:5000\n"
        "PREFECT_API_URL=http://elsewhere:4200/api\nMLFLOW_S3_ENDPOINT_URL=http://minio:9000\nDVC_BUCKET=b\n")
    settings = load_settings(workspace=tmp_path)
    assert settings.profile == "cluster" and settings.tracking_uri == "http://mlflow:5000"
    assert settings.prefect_api_url is None  # PREFECT_API_URL is Prefect's, not ORCHESTRA_PREFECT_API_URL


def test_a_misspelt_orchestra_line_is_an_error(settings_file, tmp_path):
    settings_file.write_text("ORCHESTRA_PROFILE=cluster\nORCHESTRA_RAY_ADRESS=head:6379\n")
    with pytest.raises(ValidationError, match="ray_adress"):
        load_settings(workspace=tmp_path)
