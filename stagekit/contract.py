"""Types of the stage contract (see `pipelines/__init__.py`)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolorchestra.core.settings import Settings, load_settings


class StageParams(BaseModel):
    """Base of every stage's parameter model: frozen, unknown keys rejected.

    A stage's section in `params.yaml` has `deps` and `outs` (name -> path relative to the
    workspace; dvc.yaml interpolates the same values, so paths are written once) and its own keys.
    Keys of the shared `base:` section (e.g. `seed`) are passed to a stage that declares them.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    REQUIRED_DEPS: ClassVar[dict[str, str]] = {}
    """Input keys a stage cannot run without, each with an example path for the error message."""
    REQUIRED_OUTS: ClassVar[dict[str, str]] = {}
    """Output keys, likewise; an example without a suffix marks a folder output."""

    deps: dict[str, str] = {}
    outs: dict[str, str] = {}

    @model_validator(mode="after")
    def _declared_paths(self) -> StageParams:
        for where, mapping, required in (("deps", self.deps, self.REQUIRED_DEPS),
                                         ("outs", self.outs, self.REQUIRED_OUTS)):
            for key, example in required.items():
                if key not in mapping:
                    raise ValueError(f"{where}.{key} is required (e.g. {where}: {{{key}: {example}}})")
        for key, example in self.REQUIRED_OUTS.items():
            if not Path(example).suffix and Path(self.outs[key]).suffix:
                raise ValueError(f"outs.{key} must be a folder path (no file suffix), e.g. {example}")
        return self


class StagePaths(BaseModel):
    model_config = ConfigDict(frozen=True)

    workspace: Path
    deps: dict[str, Path]
    """Absolute paths of the inputs."""
    outs: dict[str, Path]
    """Absolute staging paths: write here; the runner moves each into place after `run` returns."""
    settings: Settings = Field(default_factory=load_settings)
    """The run's settings (state folder, MLflow, endpoints): stages use these, never their own."""
