"""The preferences pipeline in phases: generate -> validate -> check -> split -> assemble -> write.

1. **generate**: grammar pairs for the catalog (`grammar.py`), and/or LLM pairs from a proposer
   checked by a verifier (`propose.py`); LLM pairs that repeat a grammar instruction are dropped;
2. **validate**: the Great Expectations suite on the raw rows (`expectations.py`): a failure stops
   here with every failing expectation listed;
3. **check**: every pair's intents against the training reward (`pairs.check_direction`): a pair
   whose vector does not rank rollouts the way its instruction says stops the run;
4. **split**: train / eval without leakage, held-out kinds only in eval (`split.py`); the result
   is re-checked for leaks;
5. **assemble**: training and eval instances (`assemble.py`);
6. **write**: `<preferences>/{train,eval}.jsonl` and `report.json`; `<datasets>/hf/` (a
   `datasets.DatasetDict`), `<datasets>/verl/{train,eval}.parquet` and `manifest.json`.

Used by the `preferences` stage and by `orchestra preferences`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.core.fs import atomic_write_json
from toolorchestra.episodes.instance import Instance, Split
from toolorchestra.episodes.pool import TaskPool
from toolorchestra.episodes.rows import write_hf_dataset, write_verl_parquet
from toolorchestra.llm.base import LLM
from toolorchestra.preferences.assemble import AssemblyConfig, assemble, instance_record
from toolorchestra.preferences.expectations import SuiteReport, raise_on_failure, validate_pair_rows
from toolorchestra.preferences.grammar import KINDS, generate_grammar_pairs
from toolorchestra.preferences.pairs import (
    PreferencePair,
    check_directions,
    normalise_instruction,
    pair_rows,
    save_pairs,
)
from toolorchestra.preferences.propose import ProposeConfig, ProposeStats, propose_pairs
from toolorchestra.preferences.split import SplitConfig, leaks, split_pairs
from toolorchestra.tools.catalog import Catalog


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Literal["grammar", "llm", "both"] = "grammar"
    kinds: list[str] | None = Field(None, description=f"grammar kinds to generate (default all: {list(KINDS)})")
    blocks_per_kind: int = Field(4, ge=1, le=100)
    llm: ProposeConfig = ProposeConfig()


class PreferencesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    generator: GeneratorConfig = GeneratorConfig()
    split: SplitConfig = SplitConfig()
    assembly: AssemblyConfig = AssemblyConfig()


class DirectionError(OrchestraError):
    """Some pairs' vectors do not rank rollouts the way their instructions say."""


@dataclass
class PreferenceBuild:
    pairs: list[PreferencePair]
    train: list[PreferencePair]
    eval: list[PreferencePair]
    suite: SuiteReport
    instances: dict[Split, list[Instance]]
    notes: dict[str, str] = field(default_factory=dict)
    propose_stats: ProposeStats | None = None
    llm_duplicates_of_grammar: int = 0

    def report(self) -> dict[str, Any]:
        return {
            "pairs": len(self.pairs),
            "kinds": {split: dict(Counter(p.kind for p in pairs)) for split, pairs in
                      (("train", self.train), ("eval", self.eval))},
            "heldout_kinds_in_eval_only": sorted({p.kind for p in self.eval} - {p.kind for p in self.train}),
            "sources": dict(Counter(p.source for p in self.pairs)),
            "suite": self.suite.model_dump(),
            "notes": self.notes,
            "propose": self.propose_stats.model_dump() if self.propose_stats else None,
            "llm_duplicates_of_grammar": self.llm_duplicates_of_grammar,
            "instances": {split: len(items) for split, items in self.instances.items()},
        }

    def metrics(self) -> dict[str, float]:
        out = {
            "pairs_total": float(len(self.pairs)),
            "pairs_train": float(len(self.train)),
            "pairs_eval": float(len(self.eval)),
            "kinds_train": float(len({p.kind for p in self.train})),
            "kinds_eval": float(len({p.kind for p in self.eval})),
            "kinds_eval_only": float(len({p.kind for p in self.eval} - {p.kind for p in self.train})),
            "instances_train": float(len(self.instances.get("train", []))),
            "instances_eval": float(len(self.instances.get("eval", []))),
            "suite_expectations": float(self.suite.evaluated),
        }
        for split, items in self.instances.items():
            if items:
                out[f"instances_{split}_with_preference"] = float(sum(i.preference is not None for i in items))
                out[f"instances_{split}_efficiency_share"] = sum(  # reward weighs cost or latency
                    bool({"cost", "latency"} & set(i.preference.vector if i.preference else i.default_preference or {}))
                    for i in items) / len(items)
                out[f"instances_{split}_mean_tools"] = sum(len(i.catalog_tools) for i in items) / len(items)
        if self.propose_stats is not None:
            for key, value in self.propose_stats.model_dump().items():
                if isinstance(value, int):
                    out[f"llm_{key}"] = float(value)
        return out


def generate_pairs(catalog: Catalog, config: GeneratorConfig, *, seed: int, proposer: LLM | None = None,
                   verifier: LLM | None = None) -> tuple[list[dict[str, Any]], dict[str, str], ProposeStats | None, int]:
    """Raw pair rows (dicts, validated next), notes on skipped kinds, LLM stats, LLM duplicates."""
    rows: list[dict[str, Any]] = []
    notes: dict[str, str] = {}
    stats = None
    dropped = 0
    if config.source in ("grammar", "both"):
        pairs, notes = generate_grammar_pairs(catalog, kinds=config.kinds, blocks=config.blocks_per_kind, seed=seed)
        rows.extend(pair_rows(pairs))
    if config.source in ("llm", "both"):
        if proposer is None or verifier is None:
            raise ConfigError(None, f"generator.source={config.source!r} needs a proposer and a verifier LLM: "
                              "set preferences.proposer and preferences.verifier to catalog model aliases",
                              key="preferences.generator.source")
        llm_pairs, stats = propose_pairs(proposer, verifier, catalog, config.llm)
        seen = {normalise_instruction(r["instruction"]) for r in rows}
        for pair in llm_pairs:
            if normalise_instruction(pair.instruction) in seen:
                dropped += 1
                continue
            rows.append(pair.model_dump(mode="json"))
    return rows, notes, stats, dropped


def build_preferences(catalog: Catalog, pool: TaskPool, config: PreferencesConfig, *, seed: int = 0,
                      proposer: LLM | None = None, verifier: LLM | None = None) -> PreferenceBuild:
    """Phases 1-5 (see the module docstring); raises on a failed suite, direction check or leak."""
    rows, notes, stats, dropped = generate_pairs(catalog, config.generator, seed=seed, proposer=proposer,
                                                 verifier=verifier)
    if not rows:
        raise OrchestraError("no preference pairs were generated: enable grammar kinds or check the LLM report")
    suite = validate_pair_rows(rows, [t.name for t in catalog.tools], kinds=[*KINDS, "mixed"],
                               models=list(catalog.models))
    raise_on_failure(suite)
    pairs = [PreferencePair.model_validate(r) for r in rows]
    problems = check_directions(pairs)
    if problems:
        raise DirectionError(f"{len(problems)} preference intents disagree with the reward: " + "; ".join(problems[:5]))
    train, evaluation = split_pairs(pairs, config.split)
    leaked = leaks(train, evaluation)
    if leaked:  # cannot happen by construction; checked because a leak would silently inflate eval
        raise OrchestraError(f"preference split leaks {len(leaked)} keys between train and eval: {leaked[:5]}")
    instances = assemble(pool, catalog, train, evaluation, config.assembly)
    return PreferenceBuild(pairs=pairs, train=train, eval=evaluation, suite=suite, instances=instances,
                           notes=notes, propose_stats=stats, llm_duplicates_of_grammar=dropped)


def write_outputs(build: PreferenceBuild, preferences_dir: str | Path, datasets_dir: str | Path,
                  *, agent_name: str = "tool_agent") -> None:
    """Phase 6: write the pair splits and the two dataset exports into (staged) folders."""
    preferences_dir, datasets_dir = Path(preferences_dir), Path(datasets_dir)
    save_pairs(preferences_dir / "train.jsonl", build.train)
    save_pairs(preferences_dir / "eval.jsonl", build.eval)
    atomic_write_json(preferences_dir / "report.json", build.report())
    for split, items in build.instances.items():
        write_verl_parquet(items, datasets_dir / "verl" / f"{split}.parquet", agent_name)
    write_hf_dataset(build.instances, datasets_dir / "hf", agent_name)
    atomic_write_json(datasets_dir / "manifest.json", {
        "format": {"verl": "verl/{split}.parquet (RLHFDataset)", "hf": "hf/ (datasets.load_from_disk)"},
        "agent_name": agent_name,
        "splits": {split: len(items) for split, items in build.instances.items()},
        "instances": [instance_record(i) for items in build.instances.values() for i in items],
    })
