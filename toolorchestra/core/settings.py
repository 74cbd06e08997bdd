"""Runtime settings: where state lives and which services to use.

Values come from environment variables prefixed `ORCHESTRA_` (nested with `__`, e.g.
`ORCHESTRA_MLFLOW__TRACKING_URI`) and an optional dotenv-style file named by
`ORCHESTRA_SETTINGS_FILE` (the cluster profile ships one). The embedded default keeps everything
under `<workspace>/.orchestra/`: MLflow on SQLite, Prefect home, the local DVC remote, caches.

Secrets (API keys, passwords) are never fields here: settings hold only the *name* of the
environment variable that carries a secret, and `secret()` reads it on demand, so printing or
logging settings can never leak one.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def find_workspace(start: Path | None = None) -> Path:
    """The project root: the nearest folder upwards holding `params.yaml` or `dvc.yaml`.

    Falls back to the current folder so library use outside a project still works.
    """
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / "params.yaml").exists() or (folder / "dvc.yaml").exists():
            return folder
    return start


class MlflowSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    tracking_uri: str | None = None
    """Default: sqlite:///<state>/mlflow.db (absolute)."""
    artifact_root: str | None = None
    """Default: <state>/mlartifacts (absolute); `s3://bucket/prefix` on the cluster."""
    experiment: str = "toolorchestra"
    s3_endpoint_url: str | None = None


class DvcSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    remote_url: str | None = None
    """Default: <state>/dvc-remote; `s3://bucket/prefix` on the cluster."""


DEFAULT_CREDENTIAL_HOSTS: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("api.openai.com",),
    "TAVILY_API_KEY": ("api.tavily.com",),
    "VLLM_API_KEY": ("localhost", "127.0.0.1"),
}
"""The key variables a catalog may name (`api_key_env`), each with the hosts its value may be sent to."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ORCHESTRA_",
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        # A settings file may carry other tools' variables too (infra/cluster.env: PREFECT_API_URL,
        # MLFLOW_S3_ENDPOINT_URL, ...): only ORCHESTRA_* ones are read, and an unknown one is an error.
        dotenv_filtering="match_prefix",
    )

    profile: str = Field("embedded", pattern="^(embedded|cluster)$")
    workspace: Path = Field(default_factory=find_workspace)
    state_dir: Path | None = None
    """Default: <workspace>/.orchestra (git-ignored)."""
    mlflow: MlflowSettings = MlflowSettings()
    dvc: DvcSettings = DvcSettings()
    prefect_api_url: str | None = None
    """None: Prefect's ephemeral API (embedded profile)."""
    ray_address: str | None = None
    s3_endpoint_url: str | None = None
    credential_hosts: dict[str, tuple[str, ...]] = Field(default_factory=lambda: dict(DEFAULT_CREDENTIAL_HOSTS))
    """Environment variables a catalog may name as `api_key_env`, each with the hosts (`host` or
    `host:port`) its value may be sent to (`ORCHESTRA_CREDENTIAL_HOSTS`, a JSON object; replaces the
    defaults). A catalog, a registered model's included, can only pick among these."""
    read_only_roots: tuple[Path, ...] = ()
    """Folders outside the workspace a stage may read its deps from (`ORCHESTRA_READ_ONLY_ROOTS`,
    a JSON list); the installed package's data is always allowed (see `core/paths.py`)."""

    @field_validator("workspace", "state_dir")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().resolve() if value is not None else None

    @property
    def state(self) -> Path:
        return self.state_dir or self.workspace / ".orchestra"

    @property
    def models_cache(self) -> Path:
        return self.state / "models"

    @property
    def prefect_home(self) -> Path:
        return self.state / "prefect"

    @property
    def tracking_uri(self) -> str:
        return self.mlflow.tracking_uri or f"sqlite:///{self.state / 'mlflow.db'}"

    @property
    def artifact_root(self) -> str:
        return self.mlflow.artifact_root or (self.state / "mlartifacts").as_uri()

    @property
    def dvc_remote_url(self) -> str:
        return self.dvc.remote_url or str(self.state / "dvc-remote")


def load_settings(**overrides: object) -> Settings:
    """Build settings from the environment (and `ORCHESTRA_SETTINGS_FILE` if set)."""
    env_file = os.environ.get("ORCHESTRA_SETTINGS_FILE")
    if env_file and not Path(env_file).is_file():
        from toolorchestra.core.errors import ConfigError

        raise ConfigError(env_file, "settings file named by ORCHESTRA_SETTINGS_FILE does not exist")
    return Settings(_env_file=env_file, **overrides)  # type: ignore[call-arg]


def secret(env_var: str | None) -> str | None:
    """Read a secret from the environment by variable name (never stored in settings)."""
    if not env_var:
        return None
    value = os.environ.get(env_var)
    return value or None
