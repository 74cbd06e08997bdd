"""Training-set assembly: tasks x preferences x random tool subsets x perturbed prices.

Each instance pairs one validated task with a preference (or none), a random subset of the
catalog's tools, and a randomly perturbed price schedule, as the paper does so the policy learns to
read the tools and prices it is given instead of memorising one catalog:

- **tools**: what the task needs is always offered (a QA task: the catalog's `answer`-role tools and
  every basic tool, code and search, whichever its category needs;
  a tool-use task: all of its domain's tools, which are not catalog tools), plus every tool the
  preference names (an avoidance must be testable), plus a uniformly sized random sample of the
  other catalog tools (at least `min_catalog_tools` catalog tools in all);
- **prices**: every tool's and every model's prices are scaled by a factor drawn log-uniformly from
  `[1/price_jitter, price_jitter]`, independently per instance; the orchestrator sees the prices in
  its system prompt and the reward's cost is computed from the same schedule;
- **preference**: with probability `p_no_preference` none, else one drawn from the split's pairs.
  An instance without one still gets efficiency terms in its reward: `default_preference`
  (accuracy, cost and latency weights), each non-accuracy weight scaled by a factor drawn
  uniformly from `[1 - j, 1 + j]` (`default_preference_jitter`), seeded per instance, written into
  the instance (`Instance.default_preference`) so the exported rows carry it. The assembly owns
  the default because it owns the training set: a run's rewards are then a property of its data
  (versioned by DVC), and the episode config's `default_preference` is only the fallback for
  instances built elsewhere. A user preference's vector is used as it is (an "accuracy, whatever
  the cost" preference means what it says).

Train instances use train tasks and train preferences; eval instances use held-out tasks (a seeded
`eval_task_fraction` of each domain / QA category, whole evolution families at a time, see
`split_units`) and eval preferences, so neither tasks, their evolutions, nor preferences leak.
Validation instances (`validation_task_fraction` > 0) are carved the same way from the training
tasks, after the eval split (so the test task list does not move), with train preferences: the
train stage picks its checkpoint on them, so they are neither trained on nor tested on. The
prompt is the agent loop's: its system prompt (plus the domain policy and the price list) and the
task with the preference appended, as `orchestra ask --preference` does.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolorchestra.agent.loop import SYSTEM_PROMPT, user_message
from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.task import dump_task
from toolorchestra.episodes.environment import DEFAULT_PREFERENCE, QA_BASIC_TOOLS
from toolorchestra.episodes.instance import Instance, Split
from toolorchestra.episodes.pool import QAItem, TaskPool, ToolUseTask, load_pool, task_domain, task_prompt
from toolorchestra.episodes.reward import ACCURACY, check_preference
from toolorchestra.preferences.pairs import PreferencePair, load_pairs
from toolorchestra.tools.catalog import Catalog, ExpertBackend, Price


class AssemblyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    instances_per_task: int = Field(1, ge=1, le=100)
    p_no_preference: float = Field(0.2, ge=0.0, le=1.0)
    default_preference: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_PREFERENCE),
        description="the reward's weights of an instance without a preference (reward keys)")
    default_preference_jitter: float = Field(
        0.5, ge=0.0, lt=1.0, description="each non-accuracy default weight scaled by [1-j, 1+j] per instance")
    min_catalog_tools: int = Field(1, ge=0, le=1_000)
    price_jitter: float = Field(2.0, ge=1.0, le=100.0, description="prices scaled by [1/j, j]; 1 = none")
    eval_task_fraction: float = Field(0.1, ge=0.0, lt=1.0)
    validation_task_fraction: float = Field(0.0, ge=0.0, lt=1.0, description=(
        "of the training tasks (per domain / QA category, whole units), the share kept out of training as "
        "the `validation` split, on which the train stage chooses between its warm start and GRPO's policy"))
    validation_kinds: list[Literal["qa", "tool_use"]] = Field(
        default_factory=lambda: ["qa", "tool_use"], min_length=1,
        description="task kinds the validation split is carved from (the others all train)")
    heldout_domains: list[str] = Field(default_factory=list, description="domains whose every task (tool use "
                                       "and QA) is held out: the unseen-domain benchmark")
    max_tasks: int | None = Field(None, ge=1, le=10_000_000, description="cap on tasks used (a tiny profile)")
    include_policy: bool = True
    max_policy_chars: int = Field(4000, ge=0, le=1_000_000)
    show_prices: bool = True
    agent_name: str = Field("tool_agent", min_length=1, description="verl agent loop of every row")
    seed: int = 0


    @field_validator("default_preference")
    @classmethod
    def _reward_keys(cls, vector: dict[str, float]) -> dict[str, float]:
        return check_preference(vector)  # known keys and finite weights, or a one-line reason


def _stable(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{text}".encode()).digest()[:8], "big")


def _calls_key(task: ToolUseTask, n: int) -> str:
    return json.dumps([[a.name, a.arguments] for a in task.task.actions[:n]], sort_keys=True, default=str)


def split_units(items: Iterable[Any]) -> dict[str, str]:
    """Task id -> the unit a split keeps on one side: its evolution family (`.family`: a base task
    and the tasks evolved from it), merged with every tool-use task of the same domain whose whole
    golden-action list (names and arguments) starts another's. Either way a held-out task would
    share a golden-action prefix with a training task. QA items are units of their own."""
    items = list(items)
    parent = {t.id: t.family for t in items}
    roots = {f: f for f in parent.values()}

    def find(x: str) -> str:
        while roots[x] != x:
            roots[x] = roots[roots[x]]
            x = roots[x]
        return x

    whole: dict[tuple[str, str], list[str]] = defaultdict(list)  # (domain, all calls) -> task ids
    tool_use = [t for t in items if isinstance(t, ToolUseTask) and t.task.actions]
    for t in tool_use:
        whole[(t.domain.name, _calls_key(t, len(t.task.actions)))].append(t.id)
    for t in tool_use:
        for n in range(1, len(t.task.actions) + 1):
            for other in whole.get((t.domain.name, _calls_key(t, n)), []):
                a, b = find(parent[t.id]), find(parent[other])
                if a != b:
                    roots[max(a, b)] = min(a, b)  # the smaller id names the unit: deterministic
    return {tid: find(f) for tid, f in parent.items()}


def split_tasks(pool: TaskPool, fraction: float, seed: int,
                heldout_domains: Iterable[str] = ()) -> tuple[list[Any], list[Any]]:
    """(train tasks, eval tasks): per domain / QA category, whole units (`split_units`: an
    evolution family, with the tasks sharing its golden-action prefix) go to eval in the order of
    a seeded hash of the unit id until at least the `fraction` of the stratum's tasks is reached
    (at least one unit where a stratum has two or more and fraction > 0; never the last one).
    Splitting tasks one by one put an evolved task and its base on different sides, so held-out
    tasks shared a golden-action prefix with training tasks. Every task of a `heldout_domains`
    domain goes to eval: training never sees that domain."""
    unseen = set(heldout_domains)
    known = {task_domain(i) for i in pool.qa} | {t.domain.name for t in pool.tool_use}
    if unseen - known:  # a typo would otherwise hold nothing out and train on the "unseen" domain
        raise ConfigError(None, f"held-out domain(s) {sorted(unseen - known)} have no tasks; the task pool's "
                          f"domains are {sorted(d for d in known if d)}", key="heldout_domains")
    strata: dict[str, list[Any]] = defaultdict(list)
    evaluation: list[Any] = []
    for item in pool.qa:
        if task_domain(item) in unseen:
            evaluation.append(item)
        else:
            strata[f"qa:{item.qa_category}"].append(item)
    for task in pool.tool_use:
        if task.domain.name in unseen:
            evaluation.append(task)
        else:
            strata[f"tool_use:{task.domain.name}"].append(task)
    evaluation.sort(key=lambda t: _stable(seed, t.id))
    unit_of = split_units([*pool.qa, *pool.tool_use])
    train: list[Any] = []
    for key in sorted(strata):
        items = strata[key]
        units: dict[str, list[Any]] = defaultdict(list)
        for item in items:
            units[unit_of[item.id]].append(item)
        order = sorted(units, key=lambda u: (_stable(seed, u), u))
        target = 0
        if fraction > 0 and len(order) >= 2:
            target = min(len(items) - 1, max(1, round(fraction * len(items))))
        held: list[Any] = []
        for unit in order[:-1]:  # the last unit always trains
            if len(held) >= target:
                break
            held.extend(units[unit])
        held_ids = {t.id for t in held}
        evaluation.extend(sorted(held, key=lambda t: _stable(seed, t.id)))
        train.extend(sorted((t for t in items if t.id not in held_ids), key=lambda t: _stable(seed, t.id)))
    return train, evaluation


def perturbed(price: Price, rng: random.Random, jitter: float) -> Price:
    if jitter == 1.0:
        return price
    factor = math.exp(rng.uniform(-math.log(jitter), math.log(jitter)))
    return Price(**{k: None if v is None else float(f"{v * factor:.6g}") for k, v in price.model_dump().items()})


def perturbed_weights(vector: dict[str, float], rng: random.Random, jitter: float) -> dict[str, float]:
    """`vector` with every weight but accuracy's scaled by a factor uniform in [1-jitter, 1+jitter]."""
    return {k: w if k == ACCURACY or jitter == 0 else float(f"{w * rng.uniform(1 - jitter, 1 + jitter):.4g}")
            for k, w in sorted(vector.items())}


def answer_tools(catalog: Catalog) -> list[str]:
    return [t.name for t in catalog.tools if isinstance(t.backend, ExpertBackend) and t.backend.role == "answer"]


def choose_tools(catalog: Catalog, required: list[str], rng: random.Random, min_tools: int) -> list[str]:
    """`required` plus a random, uniformly sized sample of the other catalog tools (catalog order)."""
    names = [t.name for t in catalog.tools]
    must = [n for n in names if n in set(required)]
    optional = [n for n in names if n not in set(must)]
    low = min(len(optional), max(0, min_tools - len(must)))
    chosen = set(must) | set(rng.sample(optional, rng.randint(low, len(optional))))
    return [n for n in names if n in chosen]


def _format_price(p: Price) -> str:
    parts = []
    if p.input_per_mtok or p.output_per_mtok:
        parts.append(f"${p.input_per_mtok:.4g} in / ${p.output_per_mtok:.4g} out per 1M tokens")
    if p.per_call:
        parts.append(f"${p.per_call:.4g} per call")
    if p.per_second:
        parts.append(f"${p.per_second:.4g} per second")
    return " + ".join(parts) or "free"


def price_sheet(catalog: Catalog, tools: list[str], tool_prices: dict[str, Price], model_prices: dict[str, Price]) -> str:
    """The price list the orchestrator reads: each offered catalog tool, and per model for LLM tools."""
    lines = []
    for name in tools:
        entry = catalog.tool(name)
        own = _format_price(tool_prices[name])
        # a sheet that hid an expert's sandbox run would make it look cheaper than it is; the run is
        # billed at the episode's price of that tool (the catalog's when it is not offered)
        inner = [f"its {t} run ({_format_price(tool_prices.get(t) or catalog.tool(t).price)})"
                 for t in catalog.inner_tools(entry)]
        line = f"- {name}: " + " + ".join(([] if inner and own == "free" else [own]) + inner)
        if isinstance(entry.backend, ExpertBackend):
            models = ", ".join(f"{a} {_format_price(model_prices[a])}" for a in entry.backend.models)
            line += f"; models: {models}"
        lines.append(line)
    return "Prices of your tools (USD):\n" + "\n".join(lines)


def _system_prompt(config: AssemblyConfig, policy: str | None, sheet: str | None) -> str:
    parts = [SYSTEM_PROMPT]
    if config.include_policy and policy:
        parts.append(f"Domain policy:\n{policy[: config.max_policy_chars]}")
    if sheet:
        parts.append(sheet)
    return "\n\n".join(parts)


def _domain_tool_names(task: ToolUseTask) -> list[str]:
    return [spec.name for spec in task.domain.domain.tool_specs()]


def build_instance(task: QAItem | ToolUseTask, *, split: Split, copy: int, catalog: Catalog,
                   preferences: list[PreferencePair], config: AssemblyConfig) -> Instance:
    """One instance for `task`; all randomness is seeded by (seed, split, task id, copy)."""
    task_id = task.id
    rng = random.Random(f"{config.seed}:{split}:{task_id}:{copy}")
    preference = None
    if preferences and rng.random() >= config.p_no_preference:
        preference = rng.choice(preferences)
    pref_tools = [t for t in (preference.tools if preference else []) if t in {x.name for x in catalog.tools}]
    if isinstance(task, QAItem):
        # Every basic tool (code and search) is always offered, the one that solves the category among
        # them: the routing to learn. Offered alone, the fitting tool was a shortcut ("call the basic
        # tool that is offered") that a warm start learned instead of reading the question.
        fitting = [t for t in QA_BASIC_TOOLS if t in {x.name for x in catalog.tools}]
        required = answer_tools(catalog) + pref_tools + fitting
        # A synthesized item names its domain: the episode's local search is scoped to it.
        question, policy, domain, domain_tools = task.question, None, getattr(task, "domain", None), []
        kind: Literal["qa", "tool_use"] = "qa"
        data_source = f"toolorchestra/qa/{task.qa_category}"
        payload = task.dump()
        truth = {"kind": "qa", "task_id": task_id, "answer": str(task.answer),
                 "answer_type": task.answer_type, "category": task.category}
    else:
        required = pref_tools
        question, policy, domain = task_prompt(task.task), task.domain.policy, task.domain.name
        domain_tools = _domain_tool_names(task)
        kind = "tool_use"
        data_source = f"toolorchestra/toolscale/{domain}"
        payload = dump_task(task.task)
        criteria = task.task.evaluation_criteria
        truth = {"kind": "tool_use", "task_id": task_id, "domain": domain, "tau2_id": task.task.id,
                 "evaluation_criteria": criteria.model_dump(mode="json", exclude_unset=True) if criteria else None}
    tools = choose_tools(catalog, required, rng, config.min_catalog_tools)
    tool_prices = {t.name: perturbed(t.price, rng, config.price_jitter) for t in catalog.tools if t.name in tools}
    model_prices = {alias: perturbed(m.price, rng, config.price_jitter) for alias, m in sorted(catalog.models.items())}
    sheet = price_sheet(catalog, tools, tool_prices, model_prices) if config.show_prices and tools else None
    prompt = [
        {"role": "system", "content": _system_prompt(config, policy, sheet)},
        {"role": "user", "content": user_message(question, preference.instruction if preference else None)},
    ]
    default = None
    if preference is None:  # its own generator, so the other draws stay what they were
        default = perturbed_weights(config.default_preference,
                                    random.Random(f"{config.seed}:{split}:{task_id}:{copy}:default_preference"),
                                    config.default_preference_jitter)
    return Instance(
        id=f"{split}-{task_id}-{copy}", split=split, kind=kind, task_id=task_id, data_source=data_source,
        domain=domain, task=payload, ground_truth=truth, preference=preference, default_preference=default,
        catalog_tools=tools,
        domain_tools=domain_tools, tool_prices=tool_prices, model_prices=model_prices, prompt=prompt,
    )


def as_pool(tasks: Iterable[Any]) -> TaskPool:
    tasks = list(tasks)
    return TaskPool(qa=[t for t in tasks if isinstance(t, QAItem)], tool_use=[t for t in tasks if isinstance(t, ToolUseTask)])


def assemble(pool: TaskPool, catalog: Catalog, train_pairs: list[PreferencePair], eval_pairs: list[PreferencePair],
             config: AssemblyConfig) -> dict[Split, list[Instance]]:
    """Train, validation (when `validation_task_fraction` > 0) and eval instances (see the module
    docstring)."""
    train_tasks, eval_tasks = split_tasks(pool, config.eval_task_fraction, config.seed, config.heldout_domains)
    if config.max_tasks is not None:
        rng = random.Random(config.seed)
        cap_eval = max(1, round(config.max_tasks * config.eval_task_fraction)) if eval_tasks else 0
        train_tasks = sorted(rng.sample(train_tasks, min(len(train_tasks), config.max_tasks - cap_eval)),
                             key=lambda t: t.id)
        eval_tasks = sorted(rng.sample(eval_tasks, min(len(eval_tasks), cap_eval)), key=lambda t: t.id)
    validation_tasks: list[Any] = []
    if config.validation_task_fraction > 0:  # carved from train, after eval: the test task list is unchanged
        kinds = {"qa": QAItem, "tool_use": ToolUseTask}
        carved = tuple(kinds[k] for k in config.validation_kinds)
        kept, validation_tasks = split_tasks(as_pool(t for t in train_tasks if isinstance(t, carved)),
                                             config.validation_task_fraction, config.seed)
        train_tasks = [*kept, *(t for t in train_tasks if not isinstance(t, carved))]
    out: dict[Split, list[Instance]] = {}
    for split, tasks, pairs in (("train", train_tasks, train_pairs), ("validation", validation_tasks, train_pairs),
                                ("eval", eval_tasks, eval_pairs)):
        if split == "validation" and not tasks:
            continue
        out[split] = [  # type: ignore[index]
            build_instance(task, split=split, copy=copy, catalog=catalog, preferences=pairs, config=config)  # type: ignore[arg-type]
            for task in tasks for copy in range(config.instances_per_task)
        ]
    return out


def instance_record(instance: Instance) -> dict[str, Any]:
    """A JSON-safe summary row (for reports and manifests)."""
    return {
        "id": instance.id, "split": instance.split, "task_kind": instance.kind, "task_id": instance.task_id,
        "domain": instance.domain, "tools": instance.tools,
        "preference": instance.preference.id if instance.preference else None,
        "tool_prices": {k: v.model_dump() for k, v in instance.tool_prices.items()},
    }


def build_instances(
    tasks_root: str | Path,
    catalog: Catalog,
    *,
    preferences: str | Path | None = None,
    eval_preferences: str | Path | None = None,
    domains_root: str | Path | None = None,
    **assembly: Any,
) -> dict[Split, list[Instance]]:
    """Train and eval instances assembled in process from validated tasks (and preference pairs,
    if given), for callers that have no export yet: benchmarks, tests and a train stage pointed at
    `data/validated` only. `assembly` are `AssemblyConfig` fields."""
    pool = load_pool(tasks_root, domains_root=domains_root)
    train_pairs = load_pairs(preferences) if preferences else []
    eval_pairs = load_pairs(eval_preferences) if eval_preferences else train_pairs
    return assemble(pool, catalog, train_pairs, eval_pairs, AssemblyConfig(**assembly))
