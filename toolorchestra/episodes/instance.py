"""What an episode is played on: one task under one preference, with its tools and prices.

An `Instance` is the single instance model of the project. The `preferences` stage assembles
instances (`toolorchestra.preferences.assemble`) and exports them as verl rows
(`toolorchestra.episodes.rows`); the trainers and evaluation read them back from those rows, or get
them straight from the assembly, and play them in a `RolloutEnvironment`.

A `Preference` is what an episode needs of a user preference: its instruction (appended to the
prompt) and the reward's weight vector. The preferences layer's `PreferencePair` extends it with
where the pair came from and what it claims.

`DomainLocator` finds a tool-use instance's domain folder (`<root>/<domain>/db.json`) under the
roots it is given, and loads each domain once.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.task import Task, parse_task
from toolorchestra.episodes.reward import CALLS_PREFIX
from toolorchestra.tools.catalog import Price

Kind = Literal["qa", "tool_use"]
Split = Literal["train", "validation", "eval"]
"""validation: training-domain tasks kept out of training, on which the train stage picks its checkpoint."""


class Preference(BaseModel):
    """A user preference as an episode uses it: the instruction and the reward's weights.

    Keys of `vector` are the reward's (`toolorchestra.episodes.reward`): `accuracy`, `cost`,
    `latency` and `calls/<tool>`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    instruction: str = Field(min_length=1)
    vector: dict[str, float] = Field(min_length=1)
    kind: str = Field(min_length=1, description="family of preference (cost, avoid_tool, ...)")

    @field_validator("vector")
    @classmethod
    def _finite(cls, vector: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in vector.items() if not math.isfinite(v)}
        if bad:
            raise ValueError(f"weights must be finite, got {bad}")
        return vector

    @property
    def tools(self) -> list[str]:
        """Catalog tools the vector names (an instance offering this preference must offer them)."""
        return sorted(k[len(CALLS_PREFIX):] for k in self.vector if k.startswith(CALLS_PREFIX))


class Instance(BaseModel):
    """One task, one preference (or none), the tools offered and their prices, and the prompt."""

    model_config = ConfigDict(frozen=True)

    id: str
    split: Split = "train"
    kind: Kind
    task_id: str
    data_source: str = "toolorchestra"
    domain: str | None = None
    task: dict[str, Any] = Field(description="tau2 Task JSON (tool use) or a QA item")
    ground_truth: dict[str, Any] = Field(description="what the reward compares with (verl's reward_model)")
    preference: Preference | None = None
    default_preference: dict[str, float] | None = Field(
        None, description="the reward's weights when there is no user preference (the assembly's default "
        "vector, perturbed per instance); None: the episode config's fallback")
    catalog_tools: list[str] = Field(default_factory=list)
    domain_tools: list[str] = Field(default_factory=list)
    tool_prices: dict[str, Price] = Field(default_factory=dict)
    model_prices: dict[str, Price] = Field(default_factory=dict)
    prompt: list[dict[str, str]] = Field(min_length=2, description="system and user messages")

    @property
    def tools(self) -> list[str]:
        """Every tool offered: the domain's, then the catalog's."""
        return [*self.domain_tools, *self.catalog_tools]

    @cached_property
    def tau2_task(self) -> Task:
        if self.kind != "tool_use":
            raise ValueError(f"instance {self.id} is a QA instance, not a tool-use task")
        return parse_task(self.task, source=f"instance {self.id}")

    @property
    def answer(self) -> Any:
        return self.task.get("answer")

    @property
    def question(self) -> str:
        """The task as the orchestrator is told it (the user message, without the preference)."""
        return self.task.get("question", "") if self.kind == "qa" else self.prompt[-1]["content"]

    @property
    def required_tools(self) -> list[str]:
        """Domain tools the golden actions call: always offered."""
        if self.kind != "tool_use":
            return []
        return sorted({a.name for a in self.tau2_task.actions})


class DomainLocator:
    """Finds and loads (once) the domain folder a tool-use instance names."""

    def __init__(self, roots: Iterable[str | Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._folders: dict[str, Path] = {}
        self._loaded: dict[str, Any] = {}
        self._loading = threading.Lock()  # episodes run in threads: each domain is loaded once

    def folder(self, name: str) -> Path:
        if name in self._folders:
            return self._folders[name]
        for root in self.roots:
            for candidate in (root / name, root / "toolscale" / name):
                if (candidate / "db.json").is_file():
                    self._folders[name] = candidate
                    return candidate
            for found in sorted(root.rglob(f"{name}/db.json")) if root.is_dir() else []:
                if not any(p.startswith(".") for p in found.relative_to(root).parts):
                    self._folders[name] = found.parent
                    return found.parent
        raise ConfigError(None, f"domain {name!r} not found under {[str(r) for r in self.roots]} "
                          "(expected <root>/<domain>/db.json)", key="domain")

    def domain(self, name: str) -> Any:
        with self._loading:
            if name not in self._loaded:
                from toolorchestra.envs.domain import load_domain

                self._loaded[name] = load_domain(self.folder(name), name=name)
            return self._loaded[name]
