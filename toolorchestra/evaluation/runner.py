"""Run an evaluation: every method on every benchmark item, judged, recorded, summarised.

`evaluate(methods, benchmarks, catalog=..., settings=..., config=...)`:

1. **instances** — each item becomes an `Instance` per method with the training assembly's
   own prompt builder (`preferences.assemble.build_instance`): the same system prompt, domain
   policy and price sheet the orchestrator was trained on, the catalog's real prices (no
   jitter), and every tool the method is offered (all catalog tools, or only the basic ones for
   an expert alone); a preference item gives an *instructed* and a *neutral* instance;
2. **episodes** — `episodes.environment.RolloutEnvironment` runs them with the project's agent loop,
   greedy decoding, and scores each with `score_rollout`, the scorer training uses; `batch_size`
   episodes at a time, scheduled one of two ways (`EvalConfig.scheduling`):
   - **per episode** (`LLM.concurrent_episodes`: a remote endpoint, the routers): each episode runs
     in its own thread, so its next turn starts as soon as its tool call returns; a lockstep turn
     waits for its longest reply and slowest tool call, and sends a remote policy's requests one
     at a time;
   - **lockstep** otherwise (the local engines): one batched generation per turn, QA and tool-use
     episodes in separate batches since padding makes a batch cost its longest prompt; the tool
     calls of a turn run concurrently in a thread pool. llama.cpp would merge per-episode calls
     into its running batch too, but on 2 cores that was no faster (its decode is compute-bound)
     and which rows share a decode would then depend on timing;
3. **judging** — QA episodes the rules marked wrong go to the LLM judge when one is configured
   (`judges.py`), concurrently;
4. **records and metrics** — one `TaskRecord` per episode with its judgement and trajectory, and
   `metrics.summarize`.

Every method sees the identical list of (benchmark, task, variant); `EvalRun.check_identical_tasks`
verifies it. Departure from the paper: tasks are given to the orchestrator up front (no user
simulator), as in training.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import OrchestraError
from toolorchestra.core.settings import Settings
from toolorchestra.episodes.environment import EpisodeConfig, Rollout, RolloutEnvironment
from toolorchestra.episodes.instance import DomainLocator, Instance
from toolorchestra.evaluation.benchmarks import Benchmark, EvalItem, domain_folders, fingerprint
from toolorchestra.evaluation.judges import LLMJudge, judge_qa, judge_tool_use
from toolorchestra.evaluation.methods import Method
from toolorchestra.evaluation.metrics import Metrics, TaskRecord, Variant, summarize, task_lists
from toolorchestra.llm.base import LLM
from toolorchestra.tools.catalog import Catalog

log = logging.getLogger(__name__)
_MODEL_POLICIES = ("candidate", "champion", "orchestrator")
_STRICT = ConfigDict(extra="forbid", frozen=True)


class PromptConfig(BaseModel):
    """How instances are rendered: keep equal to the training assembly (`preferences.assembly`)."""

    model_config = _STRICT

    include_policy: bool = True
    max_policy_chars: int = Field(4000, ge=0, le=1_000_000)
    show_prices: bool = True


class EvalConfig(BaseModel):
    model_config = _STRICT

    episode: EpisodeConfig = EpisodeConfig()
    prompt: PromptConfig = PromptConfig()
    batch_size: int = Field(16, ge=1, description="episodes run at once (in lockstep: one batched generation per turn)")
    scheduling: Literal["auto", "per_episode", "lockstep"] = Field(
        "auto", description="per_episode: each episode in its own thread; lockstep: one batched generation per "
                            "turn; auto: as the policy prefers (`LLM.concurrent_episodes`; see the module docstring)")
    seed: int = 0
    adherence_margin: float = Field(0.05, ge=0.0, lt=1.0)
    judge_workers: int = Field(4, ge=1, le=256)
    method_workers: int = Field(1, ge=1, le=16, description="methods evaluated at once (one core each on "
                                "llama.cpp's one-thread engines; experts they share batch their calls)")


class _Domains(DomainLocator):
    """A locator that knows each benchmark domain's folder by name (external tau2 domains too)."""

    def __init__(self, folders: dict[str, Path], roots: Iterable[Path] = ()) -> None:
        super().__init__(list(roots))
        self.pinned = dict(folders)

    def folder(self, name: str) -> Path:
        if name in self.pinned:
            return self.pinned[name]
        return super().folder(name)


@dataclass
class EvalRun:
    benchmarks: list[Benchmark]
    methods: list[Method]
    records: list[TaskRecord]
    summary: dict[str, dict[str, Metrics]]
    seconds: dict[str, float] = field(default_factory=dict)
    config: EvalConfig = field(default_factory=EvalConfig)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.benchmarks)

    def check_identical_tasks(self) -> None:
        lists = task_lists(self.records)
        reference = next(iter(lists.values()), [])
        different = [m for m, keys in lists.items() if keys != reference]
        missing = [m.name for m in self.methods if m.name not in lists]
        if different or missing:
            raise OrchestraError(f"methods were not evaluated on identical task lists: {different + missing}")


def make_instance(item: EvalItem, catalog: Catalog, tools: list[str], prompt: PromptConfig, *,
                  instructed: bool, seed: int) -> Instance:
    """The instance a method runs for `item` (see the module docstring)."""
    from toolorchestra.preferences.assemble import AssemblyConfig, build_instance

    offered = catalog.subset(tools)
    config = AssemblyConfig(
        instances_per_task=1, p_no_preference=0.0 if instructed else 1.0, min_catalog_tools=len(offered.tools),
        price_jitter=1.0, include_policy=prompt.include_policy, max_policy_chars=prompt.max_policy_chars,
        show_prices=prompt.show_prices, seed=seed,
    )
    prefs = [item.preference] if instructed and item.preference is not None else []
    built = build_instance(item.task, split="eval", copy=0, catalog=offered, preferences=prefs, config=config)
    # One id per task for every method and variant: the domain-tool sample is seeded by it.
    return built.model_copy(update={"id": item.key})


def _runs(items: Sequence[EvalItem]) -> list[tuple[EvalItem, Variant]]:
    out: list[tuple[EvalItem, Variant]] = []
    for item in items:
        if item.preference is None:
            out.append((item, "plain"))
        else:
            out.extend([(item, "instructed"), (item, "neutral")])
    return out


def _lockstep_batches(runs: list[tuple[EvalItem, Variant]], size: int) -> list[list[int]]:
    """Indices of `runs` in batches of at most `size` episodes, QA and tool-use apart: a batched
    generation pads every prompt to the longest one, and tool-use prompts (domain tools and
    policy) are much longer."""
    out: list[list[int]] = []
    for kind in ("qa", "tool_use"):
        same = [i for i, (item, _) in enumerate(runs) if item.kind == kind]
        out.extend(same[i:i + size] for i in range(0, len(same), size))
    return out


def _per_episode_order(runs: list[tuple[EvalItem, Variant]]) -> list[int]:
    """Indices of `runs` in the order episodes start: tool-use episodes (more turns, longer prompts)
    first, so the last episodes to finish are short ones and the engine's batch stays full to the end."""
    return sorted(range(len(runs)), key=lambda i: runs[i][0].kind != "tool_use")


def _record(method: Method, item: EvalItem, variant: Variant, instance: Instance, rollout: Rollout) -> TaskRecord:
    trajectory = rollout.trajectory
    pair = item.preference
    return TaskRecord(
        method=method.name, benchmark=item.benchmark, task_id=item.id, key=item.key, kind=item.kind,
        category=(item.task.category or item.task.qa_category) if item.kind == "qa" else "tool_use", variant=variant,
        preference_id=pair.id if pair else None, preference_kind=pair.kind if pair else None,
        preference=pair.instruction if pair and variant == "instructed" else None,
        intents=[i.model_dump() for i in pair.intents] if pair else [],
        correct=False, answered=rollout.answered, format_valid=rollout.format_valid,
        cost_usd=trajectory.cost_usd, latency_s=trajectory.latency_s, turns=len(trajectory.turns),
        stop_reason=trajectory.stop_reason, tool_calls=trajectory.tool_calls,
        offered_tools=[s["function"]["name"] for s in rollout.tools],
        trajectory=trajectory.model_dump(mode="json"),
    )


def _judge(records: list[TaskRecord], pending: list[tuple[TaskRecord, Instance, Rollout]],
           judge: LLMJudge | None, workers: int) -> None:
    def one(entry: tuple[TaskRecord, Instance, Rollout]) -> None:
        record, instance, rollout = entry
        if instance.kind == "qa":
            verdict = judge_qa(instance.question, rollout.trajectory.answer, instance.answer,
                               rule_correct=rollout.correct, llm_judge=judge)
        else:
            verdict = judge_tool_use(rollout.correct, rollout.details)
        record.correct = verdict.correct
        record.judgement = verdict.model_dump(mode="json")

    # Only QA episodes the rules marked wrong can reach the LLM judge: those run concurrently.
    slow = [e for e in pending if judge is not None and e[1].kind == "qa" and not e[2].correct]
    fast = [e for e in pending if not (judge is not None and e[1].kind == "qa" and not e[2].correct)]
    for entry in fast:
        one(entry)
    if slow:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, slow))
    records.extend(e[0] for e in pending)


def evaluate(
    methods: Sequence[Method],
    benchmarks: Sequence[Benchmark],
    *,
    catalog: Catalog,
    settings: Settings,
    config: EvalConfig | None = None,
    judge: LLMJudge | None = None,
    llm_for: Callable[[str], LLM] | None = None,
    llm_for_worker: Callable[[int], Callable[[str], LLM]] | None = None,
    domain_roots: Iterable[Path] = (),
    progress: Callable[[str], None] | None = None,
    on_episode: Callable[[TaskRecord], None] | None = None,
) -> EvalRun:
    """Run every method on every item of every benchmark (see the module docstring);
    `on_episode` sees each judged record (e.g. `evaluation.traces.EpisodeTracer`).

    `llm_for_worker(k)`: the catalog models' backends for method worker k (default: `llm_for` for
    all). With `method_workers` > 1, give each worker its own local engines (`catalog_llms(...,
    replica=k)`): a llama.cpp engine decodes on one core at a time, so two baselines that call only
    the catalog's models (the expert alone, the routers) would otherwise share one core. A policy that
    is a catalog model (`Method.policy_on`: an expert alone) runs on the worker's engine too."""
    config = config or EvalConfig()
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise OrchestraError(f"method names must be unique, got {names}")
    if not methods or not benchmarks:
        raise OrchestraError("an evaluation needs at least one method and one benchmark")
    domains = _Domains(domain_folders(benchmarks), domain_roots)
    items = [item for bench in benchmarks for item in bench.items]
    runs = _runs(items)

    def per_episode(policy: LLM) -> bool:
        if config.scheduling == "auto":
            return policy.concurrent_episodes
        return config.scheduling == "per_episode"

    hooks = threading.Lock()  # progress and on_episode are called one at a time, whichever thread runs
    workers: queue.SimpleQueue[int] = queue.SimpleQueue()  # free worker slots: each has its own engines
    for k in range(config.method_workers):
        workers.put(k)

    def one_method(method: Method) -> tuple[list[TaskRecord], float]:
        worker = workers.get()
        try:
            return run_method(method, llm_for_worker(worker) if llm_for_worker is not None else llm_for)
        finally:
            workers.put(worker)

    def run_method(method: Method, models: Callable[[str], LLM] | None) -> tuple[list[TaskRecord], float]:
        started = time.perf_counter()
        episode = config.episode.model_copy(update={"policy_alias": method.policy_alias})
        env = RolloutEnvironment(catalog, settings, domains, episode, llm_for=models)
        policy = method.policy_for(models)
        tools = method.offered(catalog)
        instances = [make_instance(item, catalog, tools, config.prompt, instructed=variant == "instructed",
                                   seed=config.seed) for item, variant in runs]
        done: dict[int, TaskRecord] = {}

        def episodes(batch: list[int]) -> None:
            rollouts = env.run(policy, [instances[i] for i in batch], temperature=0.0, seed=config.seed)
            pending = [(_record(method, *runs[i], instances[i], rollout), instances[i], rollout)
                       for i, rollout in zip(batch, rollouts, strict=True)]
            judged: list[TaskRecord] = []
            _judge(judged, pending, judge, config.judge_workers)
            with hooks:
                done.update(zip(batch, judged, strict=True))
                for record in judged if on_episode is not None else ():
                    on_episode(record)

        if per_episode(policy):
            with ThreadPoolExecutor(max_workers=config.batch_size, thread_name_prefix="orchestra-episode") as pool:
                list(pool.map(lambda i: episodes([i]), _per_episode_order(runs)))
        else:
            for batch in _lockstep_batches(runs, config.batch_size):
                episodes(batch)
        records = [done[i] for i in range(len(runs))]  # in task order, whichever order they ran in
        took = time.perf_counter() - started
        with hooks:
            if progress is not None:
                progress(f"{method.name}: {len(runs)} episodes in {took:.1f}s")
            log.info("evaluated %s on %d episodes in %.1fs", method.name, len(runs), took)
        return records, took

    if config.method_workers == 1:  # in this thread: Ctrl-C stops it at once
        results = [one_method(method) for method in methods]
    else:  # records still come out in method order
        # Model policies' multi-turn episodes take longest: started first, no core idles at the end.
        order = sorted(range(len(methods)), key=lambda i: methods[i].role not in _MODEL_POLICIES)
        with ThreadPoolExecutor(max_workers=min(config.method_workers, len(methods)),
                                thread_name_prefix="orchestra-eval") as pool:
            futures = {i: pool.submit(one_method, methods[i]) for i in order}
            results = [futures[i].result() for i in range(len(methods))]
    records = [record for method_records, _ in results for record in method_records]
    seconds = {method.name: took for method, (_, took) in zip(methods, results, strict=True)}
    run = EvalRun(benchmarks=list(benchmarks), methods=list(methods), records=records,
                  summary=summarize(records, margin=config.adherence_margin), seconds=seconds, config=config)
    run.check_identical_tasks()
    return run


def method_rows(run: EvalRun) -> list[dict[str, Any]]:
    """Who was evaluated: name, role, description and provenance (model refs, versions)."""
    return [{"name": m.name, "role": m.role, "policy": m.policy.model, "policy_alias": m.policy_alias,
             "tools": m.tools, "description": m.description, **m.info} for m in run.methods]
