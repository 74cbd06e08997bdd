"""Training instances as the trainers read them: the one place where data formats are glued.

A `TrainInstance` is one task under one preference, with the tools offered and their prices, and
the prompt the orchestrator starts from. The `preferences` stage assembles and exports them
(`toolorchestra.preferences.assemble` / `.export`); this module reads every form they come in:

- `from_assembled(instance)`: an in-memory `preferences.assemble.Instance`;
- `from_verl_row(row)`: a row of the exports, in verl's RL format (`data_source`, `prompt`,
  `reward_model.ground_truth`, `extra_info` with tools, prices, preference and task), as the
  Hugging Face `datasets` folder (TRL), the verl parquet, or a JSONL of such rows hold it;
- `load_instances(path, split)`: any of those files or folders.

`build_instances(tasks_root, catalog, ...)` assembles instances in process (with the preferences
layer's assembly) for callers that have validated tasks but no export yet: benchmarks, tests and
a train stage pointed at `data/validated` only.

`DomainLocator` finds a tool-use instance's domain folder (`<root>/<domain>/db.json`) under the
roots it is given, and loads each domain once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.task import Task, parse_task
from toolorchestra.tools.catalog import Catalog, Price

Kind = Literal["qa", "tool_use"]


class TrainInstance(BaseModel):
    """One task, one preference (or none), the tools offered and their prices."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: Kind
    task_id: str
    domain: str | None = None
    task: dict[str, Any] = Field(description="tau2 Task JSON (tool use) or a QA item")
    prompt: list[dict[str, str]] = Field(min_length=2, description="system and user messages")
    domain_tools: list[str] = Field(default_factory=list)
    catalog_tools: list[str] = Field(default_factory=list)
    tool_prices: dict[str, Price] = Field(default_factory=dict)
    model_prices: dict[str, Price] = Field(default_factory=dict)
    preference: dict[str, float] | None = Field(None, description="the reward's weight vector")
    preference_text: str | None = None
    data_source: str = "toolorchestra"

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


# ------------------------------------------------------------------------------ conversions


def from_assembled(instance: Any) -> TrainInstance:
    """From `toolorchestra.preferences.assemble.Instance`."""
    pref = instance.preference
    return TrainInstance(
        id=instance.id, kind=instance.task_kind, task_id=instance.task_id, domain=instance.domain,
        task=dict(instance.task), prompt=[dict(m) for m in instance.prompt],
        domain_tools=list(instance.domain_tools), catalog_tools=list(instance.catalog_tools),
        tool_prices=dict(instance.tool_prices), model_prices=dict(instance.model_prices),
        preference=dict(pref.vector) if pref else None, preference_text=pref.instruction if pref else None,
        data_source=instance.data_source,
    )


def _prices(value: Any) -> dict[str, Price]:
    if not value:
        return {}
    if isinstance(value, Mapping):  # {name: {field: usd}}
        return {k: Price(**v) for k, v in value.items()}
    return {p["name"]: Price(**{k: v for k, v in p.items() if k != "name"}) for p in value}


def from_verl_row(row: Mapping[str, Any], *, source: str = "<row>") -> TrainInstance:
    """From a row of the preferences exports (verl's RL data format)."""
    try:
        extra = dict(row["extra_info"])
        prompt = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        kind = extra.get("task_kind") or row.get("ability")
        task = extra.get("task")
        task = json.loads(task) if isinstance(task, str) else dict(task or {})
        pref = extra.get("preference")
        vector = None
        if pref:
            weights = pref.get("weights")
            vector = ({w["key"]: float(w["weight"]) for w in weights} if isinstance(weights, list)
                      else {k: float(v) for k, v in (weights or pref.get("vector") or {}).items()})
        tools = list(extra.get("tools") or [])
        catalog_tools = list(extra.get("catalog_tools") or [])
        domain_tools = list(extra.get("domain_tools") or [t for t in tools if t not in set(catalog_tools)])
        return TrainInstance(
            id=str(extra.get("instance_id") or extra.get("index")), kind=kind,
            task_id=str(extra.get("task_id") or task.get("id")), domain=extra.get("domain"), task=task,
            prompt=prompt, domain_tools=domain_tools, catalog_tools=catalog_tools,
            tool_prices=_prices(extra.get("tool_prices")), model_prices=_prices(extra.get("model_prices")),
            preference=vector, preference_text=pref.get("instruction") if pref else None,
            data_source=row.get("data_source") or "toolorchestra",
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, f"not a training-instance row (verl format with extra_info): {exc}") from None


def load_instances(path: str | Path, *, split: str = "train") -> list[TrainInstance]:
    """Instances from a `datasets` folder (`split` of a DatasetDict), a parquet file, or JSONL rows.

    The `preferences` stage's export folder (`data/datasets`: `hf/`, `verl/`, `manifest.json`) is
    accepted as is and read from its `hf/` folder.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(path, "training set not found (run the preferences stage first)")
    if (path / "hf" / "dataset_dict.json").is_file():
        path = path / "hf"
    rows: Iterable[Mapping[str, Any]]
    if path.is_dir():
        import datasets

        try:
            loaded = datasets.load_from_disk(str(path))
        except FileNotFoundError:
            raise ConfigError(path, "not a training set: neither a `datasets` folder nor the preferences stage's "
                              "export (hf/, verl/, manifest.json); re-run the preferences stage") from None
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ConfigError(path, f"no split {split!r}; the folder has {sorted(loaded)}", key="split")
            loaded = loaded[split]
        rows = loaded.to_list()
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ConfigError(path, f"line {lineno}: not JSON: {exc.msg}") from None
    out = [from_verl_row(r, source=f"{path}[{i}]") for i, r in enumerate(rows)]
    ids = [i.id for i in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(path, "instance ids are not unique")
    return out


def build_instances(
    tasks_root: str | Path,
    catalog: Catalog,
    *,
    preferences: str | Path | None = None,
    eval_preferences: str | Path | None = None,
    domains_root: str | Path | None = None,
    **assembly: Any,
) -> dict[str, list[TrainInstance]]:
    """Train and eval instances assembled from validated tasks (and preference pairs, if given)
    with the preferences layer's assembly; `assembly` are `AssemblyConfig` fields."""
    from toolorchestra.preferences.assemble import AssemblyConfig, assemble
    from toolorchestra.preferences.pairs import load_pairs
    from toolorchestra.preferences.pool import load_pool

    pool = load_pool(tasks_root, domains_root=domains_root)
    train_pairs = load_pairs(preferences) if preferences else []
    eval_pairs = load_pairs(eval_preferences) if eval_preferences else train_pairs
    splits = assemble(pool, catalog, train_pairs, eval_pairs, AssemblyConfig(**assembly))
    return {split: [from_assembled(i) for i in items] for split, items in splits.items()}


# ------------------------------------------------------------------------------ domains


class DomainLocator:
    """Finds and loads (once) the domain folder a tool-use instance names."""

    def __init__(self, roots: Iterable[str | Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._folders: dict[str, Path] = {}
        self._loaded: dict[str, Any] = {}

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
        if name not in self._loaded:
            from toolorchestra.envs.domain import load_domain

            self._loaded[name] = load_domain(self.folder(name), name=name)
        return self._loaded[name]
