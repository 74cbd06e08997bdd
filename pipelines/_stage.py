"""Types of the stage contract (see `pipelines/__init__.py`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.settings import Settings, load_settings


class StageParams(BaseModel):
    """Base of every stage's parameter model: frozen, unknown keys rejected.

    A stage's section in `params.yaml` has `deps` and `outs` (name -> path relative to the
    workspace; dvc.yaml interpolates the same values, so paths are written once) and its own keys.
    Keys of the shared `base:` section (e.g. `seed`) are passed to a stage that declares them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    deps: dict[str, str] = {}
    outs: dict[str, str] = {}


class StagePaths(BaseModel):
    model_config = ConfigDict(frozen=True)

    workspace: Path
    deps: dict[str, Path]
    """Absolute paths of the inputs."""
    outs: dict[str, Path]
    """Absolute staging paths: write here; the runner moves each into place after `run` returns."""
    settings: Settings = Field(default_factory=load_settings)
    """The run's settings (state folder, MLflow, endpoints): stages use these, never their own."""
