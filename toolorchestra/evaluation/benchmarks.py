"""Benchmarks: the task lists every method is evaluated on, and loaders for the public formats.

An `EvalItem` is one task (a QA item or a tau2 tool-use task with its domain) and, on the
preference benchmark, one preference pair. A `Benchmark` is a named list of items. Every method of
an evaluation runs the same items (`toolorchestra.evaluation.runner` checks it).

Benchmarks are declared by a `kind` (`BenchmarkSpec`, a discriminated union used in params.yaml):

- `toolscale`: held-out tool-use tasks of the validated pool, optionally only some domains (a
  domain left out of training gives the "unseen domain" benchmark);
- `qa`: held-out QA items of the pool (numeric and lookup), optionally some categories;
- `preferences`: held-out tasks paired with the preference eval split (`data/preferences/eval.jsonl`);
- `qa_jsonl`: a QA file in the HLE / FRAMES JSONL shape (`id, question, answer, answer_type, ...`);
- `tau2`: tau2-bench / ToolScale Task JSON (`tasks.json`) with a domain folder in this project's
  declarative format (`db.json`, `tools.json`, optional `policy.md`).

*Held out* means not seen in training: when the training set is known (the `train` split of the
exported dataset), every pool task whose split unit (`preferences.assemble.split_units`: its
evolution family, merged with tasks sharing its golden-action prefix) has no task in it; otherwise the `eval` side of
`preferences.assemble.split_tasks` with the same fraction and seed the training assembly used.
A benchmark with `max_tasks` takes a seeded sample, round-robin across domains / categories so
each is represented.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.pool import (
    DomainRef,
    QAItem,
    TaskPool,
    ToolUseTask,
    fits_actions,
    load_pool,
    load_qa_file,
    task_domain,
)
from toolorchestra.preferences.pairs import PreferencePair

_STRICT = ConfigDict(extra="forbid", frozen=True)
Task = QAItem | ToolUseTask


@dataclass(frozen=True)
class EvalItem:
    """One task of a benchmark (with a preference on the preference benchmark)."""

    benchmark: str
    task: Task
    preference: PreferencePair | None = None

    @property
    def id(self) -> str:
        """The task's id: a QA id, or `<domain>/<task id>` for tool use."""
        return self.task.id

    @property
    def kind(self) -> Literal["qa", "tool_use"]:
        return "qa" if isinstance(self.task, QAItem) else "tool_use"

    @property
    def key(self) -> str:
        return f"{self.benchmark}/{self.id}" + (f"@{self.preference.id}" if self.preference else "")

    @property
    def stratum(self) -> str:
        return f"qa:{self.task.qa_category}" if isinstance(self.task, QAItem) else f"tool_use:{self.task.domain.name}"


@dataclass
class Benchmark:
    name: str
    kind: str
    items: list[EvalItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    domains: dict[str, Path] = field(default_factory=dict)
    """Folder of every domain its items name, QA items included: a count over a domain's records
    needs its database even when no ticket of that domain is evaluated."""

    def task_ids(self) -> list[str]:
        return [item.key for item in self.items]


# ------------------------------------------------------------------------------ specs


class _Spec(BaseModel):
    model_config = _STRICT

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    max_tasks: int | None = Field(None, ge=1, le=1_000_000, description="seeded, stratified sample; None: every task")


MaxActions = Annotated[int | None, Field(ge=1, le=10_000, description="only tool-use tasks with at most this many "
                                         "golden calls (match the episode's max_turns; None: all)")]


class ToolScaleSpec(_Spec):
    kind: Literal["toolscale"] = "toolscale"
    domains: list[str] | None = Field(None, description="only these domains (None: all)")
    max_actions: MaxActions = None


class QASpec(_Spec):
    kind: Literal["qa"] = "qa"
    categories: list[Literal["qa_arithmetic", "qa_numeric", "qa_lookup"]] | None = None
    domains: list[str] | None = Field(None, description="only items naming these domains (None: all)")


class PreferenceSpec(_Spec):
    kind: Literal["preferences"] = "preferences"
    task_kinds: list[Literal["qa", "tool_use"]] = Field(default_factory=lambda: ["qa", "tool_use"])
    preference_kinds: list[str] | None = Field(None, description="only these pair kinds (None: all)")
    # A ticket the episode cannot finish is wrong whatever the preference: it measures nothing.
    max_actions: MaxActions = None


class QAFileSpec(_Spec):
    """HLE / FRAMES JSONL."""

    kind: Literal["qa_jsonl"] = "qa_jsonl"
    path: str


class Tau2Spec(_Spec):
    """tau2-bench / ToolScale Task JSON with a domain folder."""

    kind: Literal["tau2"] = "tau2"
    tasks: str = Field(description="a tasks JSON file (a list of tau2 Task objects)")
    domain: str = Field(description="domain folder with db.json and tools.json")


BenchmarkSpec = Annotated[ToolScaleSpec | QASpec | PreferenceSpec | QAFileSpec | Tau2Spec, Field(discriminator="kind")]


class HeldOut(BaseModel):
    """How held-out tasks are chosen when the training set is not given (match the training
    assembly: `preferences.assembly.eval_task_fraction` and the base seed)."""

    model_config = _STRICT

    eval_task_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    domains: list[str] = Field(default_factory=list, description="the assembly's `heldout_domains`")


# ------------------------------------------------------------------------------ loaders


def load_qa_jsonl(path: str | Path, *, benchmark: str | None = None) -> list[EvalItem]:
    """HLE / FRAMES JSONL rows (`id, question, answer`, optional `answer_type`, `category`, any
    other field kept). Errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, "QA benchmark file not found (HLE / FRAMES JSONL: one {id, question, answer} per line)")
    items = load_qa_file(path)
    if not items:
        raise ConfigError(path, "QA benchmark file has no rows")
    _unique([i.id for i in items], path)
    return [EvalItem(benchmark or path.stem, item) for item in items]


def load_tau2(tasks: str | Path, domain: str | Path, *, benchmark: str | None = None) -> list[EvalItem]:
    """tau2-bench / ToolScale Task JSON with the domain folder its tools and database live in."""
    from toolorchestra.envs.task import load_tasks

    tasks, folder = Path(tasks), Path(domain)
    if not (folder / "db.json").is_file():
        raise ConfigError(folder, "not a domain folder: expected db.json and tools.json (this project's "
                          "declarative domain format)")
    ref = DomainRef(name=folder.name, folder=folder.resolve())
    loaded = [ToolUseTask(task=t, domain=ref) for t in load_tasks(tasks)]
    if not loaded:
        raise ConfigError(tasks, "no tasks in the file")
    _unique([t.id for t in loaded], tasks)
    return [EvalItem(benchmark or folder.name, t) for t in loaded]


def _unique(ids: list[str], source: Path) -> None:
    seen: set[str] = set()
    dupes = sorted({i for i in ids if i in seen or seen.add(i)})  # type: ignore[func-returns-value]
    if dupes:
        raise ConfigError(source, f"duplicate task ids {dupes[:5]}: each task needs a unique id")


def training_task_ids(dataset: str | Path | None) -> set[str] | None:
    """Task ids of the exported training set, None if unknown: its train split and its validation
    split (the train stage chose its checkpoint on those, so they are not held out either).
    `dataset` is what the preferences stage exports (`data/datasets`, whose `hf/` folder is used),
    a `datasets` folder, a parquet file or JSONL rows."""
    if dataset is None:
        return None
    from toolorchestra.episodes.rows import load_instances

    seen = load_instances(dataset, split="train") + load_instances(dataset, split="validation", missing_ok=True)
    return {i.task_id for i in seen}


def heldout_pool(pool: TaskPool, *, train_ids: set[str] | None, fraction: float, seed: int,
                 heldout_domains: Sequence[str] = ()) -> TaskPool:
    """The tasks training did not see (see the module docstring)."""
    from toolorchestra.preferences.assemble import split_tasks, split_units

    if train_ids is not None:  # a task whose split unit (evolution family) trained is not held out
        unit_of = split_units([*pool.qa, *pool.tool_use])
        seen = {unit_of[i] for i in train_ids if i in unit_of}
        return TaskPool(qa=[q for q in pool.qa if unit_of[q.id] not in seen],
                        tool_use=[t for t in pool.tool_use if unit_of[t.id] not in seen])

    _, held = split_tasks(pool, fraction, seed, heldout_domains)
    ids = {t.id for t in held}
    return TaskPool(qa=[q for q in pool.qa if q.id in ids], tool_use=[t for t in pool.tool_use if t.id in ids])


def stratified_sample(items: Sequence[EvalItem], n: int | None, seed: int) -> list[EvalItem]:
    """Up to `n` items, round-robin over strata (domain / QA category), each stratum shuffled with
    `seed`; the result is sorted by key so every run lists the same tasks in the same order."""
    if n is None or len(items) <= n:
        return sorted(items, key=lambda i: i.key)
    strata: dict[str, list[EvalItem]] = defaultdict(list)
    for item in sorted(items, key=lambda i: i.key):
        strata[item.stratum].append(item)
    rng = random.Random(seed)
    for key in sorted(strata):
        rng.shuffle(strata[key])
    chosen: list[EvalItem] = []
    while len(chosen) < n:
        for key in sorted(strata):
            if strata[key] and len(chosen) < n:
                chosen.append(strata[key].pop())
    return sorted(chosen, key=lambda i: i.key)


def preference_items(tasks: Sequence[Task], pairs: Sequence[PreferencePair], *, benchmark: str,
                     n: int | None, seed: int) -> list[EvalItem]:
    """Held-out tasks paired with eval preferences: pairs are taken round-robin across their kinds
    (so every held-out kind is covered), tasks in a seeded order; `n` items (default: one per pair)."""
    if not pairs:
        raise ConfigError(None, "the preference eval split is empty (run the preferences stage first)",
                          key="preferences")
    if not tasks:
        raise ConfigError(None, "no held-out tasks to pair with preferences", key="preferences")
    rng = random.Random(seed)
    by_kind: dict[str, list[PreferencePair]] = defaultdict(list)
    for pair in sorted(pairs, key=lambda p: p.id):
        by_kind[pair.kind].append(pair)
    for kind in sorted(by_kind):
        rng.shuffle(by_kind[kind])
    order: list[PreferencePair] = []
    while any(by_kind.values()):
        for kind in sorted(by_kind):
            if by_kind[kind]:
                order.append(by_kind[kind].pop())
    shuffled = sorted(tasks, key=lambda t: t.id)
    rng.shuffle(shuffled)
    count = n if n is not None else len(order)
    return sorted((EvalItem(benchmark, shuffled[i % len(shuffled)], order[i % len(order)]) for i in range(count)),
                  key=lambda i: i.key)


def _dedupe(items: Iterable[EvalItem]) -> list[EvalItem]:
    out: dict[str, EvalItem] = {}
    for item in items:
        out.setdefault(item.key, item)
    return list(out.values())


def build_benchmarks(
    specs: Sequence[Any],
    *,
    tasks_root: Path | None,
    workspace: Path,
    seed: int,
    heldout: HeldOut | None = None,
    train_ids: set[str] | None = None,
    preference_pairs: Sequence[PreferencePair] | None = None,
    domains_root: Path | None = None,
    tools: Iterable[str] | None = None,
) -> list[Benchmark]:
    """Every benchmark of `specs` (see the module docstring); relative paths resolve from `workspace`.
    With `tools` (the catalog tools the evaluation offers), preference pairs about other tools are
    left out: their intents could not be followed or broken."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(None, f"benchmark names must be unique, got {names}", key="benchmarks")
    heldout = heldout or HeldOut()
    held: TaskPool | None = None
    pool_domains: dict[str, Path] = {}  # every domain of the task pool, held out or not

    def pool() -> TaskPool:
        nonlocal held
        if held is None:
            if tasks_root is None:
                raise ConfigError(None, "benchmarks of kind toolscale / qa / preferences need the validated tasks "
                                  "(deps.tasks)", key="benchmarks")
            every = load_pool(tasks_root, domains_root=domains_root)
            pool_domains.update({t.domain.name: t.domain.folder for t in every.tool_use})
            held = heldout_pool(every, train_ids=train_ids, fraction=heldout.eval_task_fraction, seed=seed,
                                heldout_domains=heldout.domains)
        return held

    out: list[Benchmark] = []
    for spec in specs:
        notes: list[str] = []
        if isinstance(spec, ToolScaleSpec):
            tasks = pool().tool_use
            if spec.domains is not None:
                known = sorted({t.domain.name for t in tasks})
                missing = sorted(set(spec.domains) - set(known))
                if missing:
                    notes.append(f"no held-out tasks for domains {missing} (held-out domains: {known})")
                tasks = [t for t in tasks if t.domain.name in set(spec.domains)]
            items = [EvalItem(spec.name, t) for t in within_actions(tasks, spec.max_actions)]
        elif isinstance(spec, QASpec):
            qa = pool().qa
            if spec.categories is not None:
                qa = [q for q in qa if q.qa_category in set(spec.categories)]
            if spec.domains is not None:
                qa = [q for q in qa if task_domain(q) in set(spec.domains)]
            items = [EvalItem(spec.name, q) for q in qa]
        elif isinstance(spec, PreferenceSpec):
            candidates: list[Task] = []
            if "qa" in spec.task_kinds:
                candidates.extend(pool().qa)
            if "tool_use" in spec.task_kinds:
                candidates.extend(within_actions(pool().tool_use, spec.max_actions))
            pairs = list(preference_pairs or [])
            if spec.preference_kinds is not None:
                pairs = [p for p in pairs if p.kind in set(spec.preference_kinds)]
            if tools is not None:
                offered = set(tools)
                kept = [p for p in pairs if set(p.tools) <= offered]
                if len(kept) < len(pairs):
                    notes.append(f"{len(pairs) - len(kept)} of {len(pairs)} eval preferences name tools this "
                                 "evaluation does not offer and were left out")
                pairs = kept
            items = preference_items(candidates, pairs, benchmark=spec.name, n=spec.max_tasks, seed=seed)
        elif isinstance(spec, QAFileSpec):
            items = load_qa_jsonl(_resolve(workspace, spec.path), benchmark=spec.name)
        elif isinstance(spec, Tau2Spec):
            items = load_tau2(_resolve(workspace, spec.tasks), _resolve(workspace, spec.domain), benchmark=spec.name)
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unknown benchmark spec {spec!r}")
        items = stratified_sample(_dedupe(items), spec.max_tasks, seed)
        if not items:
            why = f" ({'; '.join(notes)})" if notes else ""
            raise ConfigError(None, f"benchmark {spec.name!r} has no tasks{why}", key="benchmarks")
        named = {task_domain(item.task) for item in items}
        out.append(Benchmark(spec.name, spec.kind, items, notes,
                             domains={n: pool_domains[n] for n in sorted(named & pool_domains.keys())}))
    _check_domains(out)
    return out


def within_actions(tasks: list[ToolUseTask], max_actions: int | None) -> list[ToolUseTask]:
    """The tool-use tasks of at most `max_actions` golden calls (all when None)."""
    return [t for t in tasks if fits_actions(t.task, max_actions)]


def _resolve(workspace: Path, path: str) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else workspace / candidate


def _bench_domains(bench: Benchmark) -> Iterable[tuple[str, Path]]:
    """(name, folder) of each domain a benchmark brings: its tickets', then the task pool's for the rest."""
    for item in bench.items:
        if isinstance(item.task, ToolUseTask):
            yield item.task.domain.name, item.task.domain.folder
    yield from bench.domains.items()


def _check_domains(benchmarks: list[Benchmark]) -> None:
    """Two benchmarks may not bring different domains under one name (episodes find a domain by name)."""
    seen: dict[str, Path] = {}
    for bench in benchmarks:
        for name, folder in _bench_domains(bench):
            if seen.setdefault(name, folder.resolve()) != folder.resolve():
                raise ConfigError(None, f"two domains are named {name!r}: {seen[name]} and {folder}; "
                                  "rename one folder", key="benchmarks")


def domain_folders(benchmarks: Iterable[Benchmark]) -> dict[str, Path]:
    """Domain name -> folder, for every domain the benchmarks' items name (tickets and QA items)."""
    return {name: folder for bench in benchmarks for name, folder in _bench_domains(bench)}


def task_list(benchmarks: Iterable[Benchmark]) -> list[dict[str, Any]]:
    """The evaluated task list as JSON rows (written beside the results)."""
    return [{"benchmark": i.benchmark, "task_id": i.id, "kind": i.kind,
             "preference": i.preference.id if i.preference else None, "key": i.key}
            for b in benchmarks for i in b.items]


def fingerprint(benchmarks: Iterable[Benchmark]) -> str:
    """A short hash of the task list: two evaluations are comparable only when it is equal."""
    import hashlib

    text = json.dumps(sorted(i["key"] for i in task_list(benchmarks)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
