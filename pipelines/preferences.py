"""Stage `preferences`: preference pairs split without leakage, and the randomised training set.

Reads the described catalog (`deps.catalog`) and the validated tasks (`deps.tasks`; `deps.domains`
when the domains' databases live outside it). Generates pairs from the template grammar and/or an
LLM proposer checked by a verifier (`proposer` / `verifier`: catalog model aliases), validates them
with a Great Expectations suite, checks every pair against the real reward
(`toolorchestra.episodes.reward.group_rewards`), splits them (held-out kinds only in eval), assembles
train/eval instances with random tool subsets and perturbed prices, and writes:

- `outs.preferences` (`data/preferences/`): `train.jsonl`, `eval.jsonl`, `report.json`;
- `outs.datasets` (`data/datasets/`): `verl/{train,eval}.parquet` (verl's RLHFDataset format),
  `hf/` (a `datasets.DatasetDict` for TRL, `datasets.load_from_disk`), `manifest.json`.

`base.seed` seeds generation, split and assembly. Run: `orchestra stage preferences` (dvc.yaml)
or `orchestra preferences` (ad hoc).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.episodes.pool import load_pool
from toolorchestra.preferences.assemble import AssemblyConfig
from toolorchestra.preferences.build import (
    GeneratorConfig,
    PreferenceBuild,
    PreferencesConfig,
    build_preferences,
    write_outputs,
)
from toolorchestra.preferences.split import SplitConfig
from toolorchestra.tools.catalog import Catalog, load_catalog


class Params(StageParams):
    REQUIRED_DEPS = {"catalog": "data/catalog/tools.json", "tasks": "data/validated"}
    REQUIRED_OUTS = {"preferences": "data/preferences", "datasets": "data/datasets"}

    seed: int = 0
    proposer: str | None = Field(None, description="catalog model alias that proposes pairs (LLM source)")
    verifier: str | None = Field(None, description="catalog model alias that checks proposed pairs")
    generator: GeneratorConfig = GeneratorConfig()
    split: SplitConfig = SplitConfig()
    assembly: AssemblyConfig = AssemblyConfig()

    @model_validator(mode="after")
    def _check(self) -> Params:
        for name, section in (("split", self.split), ("assembly", self.assembly), ("generator.llm", self.generator.llm)):
            if "seed" in section.model_fields_set:
                raise ValueError(f"set the seed once, as preferences.seed (or base.seed), not {name}.seed")
        if self.generator.source != "grammar" and (self.proposer is None or self.verifier is None):
            raise ValueError(f"generator.source={self.generator.source!r} needs proposer and verifier "
                             "(catalog model aliases); use source: grammar for the embedded default")
        return self

    def config(self) -> PreferencesConfig:
        seed = {"seed": self.seed}
        return PreferencesConfig(
            generator=self.generator.model_copy(update={"llm": self.generator.llm.model_copy(update=seed)}),
            split=self.split.model_copy(update=seed),
            assembly=self.assembly.model_copy(update=seed),
        )


def _llm(catalog: Catalog, alias: str | None, role: str, source: Path, settings: Settings) -> Any:
    if alias is None:
        return None
    if alias not in catalog.models:
        raise ConfigError(source, f"{role} {alias!r} is not a model alias of the catalog; known: {sorted(catalog.models)}",
                          key=f"preferences.{role}")
    from toolorchestra.llm.config import build_llm

    return build_llm(catalog.models[alias].backend, settings)


def _log_to_mlflow(build: PreferenceBuild) -> None:
    import mlflow

    if mlflow.active_run() is None:
        return
    mlflow.log_dict(build.report(), "preferences/report.json")
    rows = [{"split": split, "kind": p.kind, "instruction": p.instruction, "vector": p.vector_key, "template": p.template}
            for split, pairs in (("train", build.train), ("eval", build.eval)) for p in pairs]
    import pandas as pd

    mlflow.log_table(data=pd.DataFrame(rows), artifact_file="preferences/pairs.json")


def make_preferences(params: Params, *, catalog_path: Path, tasks_path: Path, preferences_dir: Path,
                     datasets_dir: Path, settings: Settings, domains_path: Path | None = None,
                     llms: dict[str, Any] | None = None) -> tuple[dict[str, float], PreferenceBuild]:
    """Build and write everything into the two (staged) folders; returns metrics and the build.
    `llms` may supply the proposer / verifier backends directly (by role)."""
    catalog = load_catalog(catalog_path)
    pool = load_pool(tasks_path, domains_root=domains_path, required=True)
    llms = llms or {}
    proposer = llms.get("proposer") or _llm(catalog, params.proposer, "proposer", catalog_path, settings)
    verifier = llms.get("verifier") or _llm(catalog, params.verifier, "verifier", catalog_path, settings)
    config = params.config()
    try:
        build = build_preferences(catalog, pool, config, seed=params.seed,
                                  proposer=proposer, verifier=verifier)
    except ValueError as exc:  # an unknown kind or similar parameter problem
        raise ConfigError(None, str(exc), key="preferences") from None
    write_outputs(build, preferences_dir, datasets_dir, agent_name=config.assembly.agent_name)
    _log_to_mlflow(build)
    return build.metrics(), build


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    metrics, _ = make_preferences(
        params, catalog_path=paths.deps["catalog"], tasks_path=paths.deps["tasks"],
        domains_path=paths.deps.get("domains"), preferences_dir=paths.outs["preferences"],
        datasets_dir=paths.outs["datasets"], settings=paths.settings,
    )
    return metrics
