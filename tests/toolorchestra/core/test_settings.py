import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings, load_settings, secret


def test_embedded_defaults_are_absolute_and_under_the_state_folder(tmp_path):
    s = Settings(workspace=tmp_path)
    assert s.state == tmp_path.resolve() / ".orchestra"
    assert s.tracking_uri == f"sqlite:///{tmp_path.resolve()}/.orchestra/mlflow.db"
    assert s.artifact_root.startswith("file:///") and s.artifact_root.endswith("/.orchestra/mlartifacts")
    assert s.prefect_home == s.state / "prefect"


def test_environment_overrides_nested_values(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("ORCHESTRA_MLFLOW__TRACKING_URI", "postgresql://mlflow@db/mlflow")
    monkeypatch.setenv("ORCHESTRA_PROFILE", "cluster")
    s = load_settings()
    assert s.tracking_uri == "postgresql://mlflow@db/mlflow" and s.profile == "cluster"


def test_settings_file_and_bad_values(tmp_path, monkeypatch):
    env = tmp_path / "cluster.env"
    env.write_text("ORCHESTRA_RAY_ADDRESS=ray://head:10001\n")
    monkeypatch.setenv("ORCHESTRA_SETTINGS_FILE", str(env))
    assert load_settings(workspace=tmp_path).ray_address == "ray://head:10001"
    monkeypatch.setenv("ORCHESTRA_SETTINGS_FILE", str(tmp_path / "missing.env"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings()
    monkeypatch.delenv("ORCHESTRA_SETTINGS_FILE")
    monkeypatch.setenv("ORCHESTRA_PROFILE", "laptop")
    with pytest.raises(ValueError, match="profile"):
        load_settings()


def test_secrets_are_read_by_name_and_never_stored(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-123")
    assert secret("MY_KEY") == "sk-123" and secret(None) is None and secret("UNSET_VAR_X") is None
    assert "sk-123" not in repr(Settings())
