"""Measuring LLM tools on sampled tasks: accuracy, tokens, cost and latency per category.

For every LLM tool of the catalog and every model alias it routes to, the real tool runs through
`Toolbox.call` (exactly as in the agent loop) on a seeded sample of tasks per category:

- `qa_numeric`, `qa_lookup`: the tool is called with the question as the episode's task (and its
  `model` argument when it routes to several models). What counts as correct depends on the
  tool's role: `answer` / `ask` / `program` / `vote` - the answer the expert delivered (the reply,
  the program's printed answer, the vote's winner; an abstention or a failed program is wrong)
  matches the gold answer (`judge.judge_answer`); `reason` (`enhance_reasoning`) - the last line the expert's
  program printed matches; `search` - the gold answer appears in what the search returned (a hit
  rate, since a search tool does not answer).
- `tool_use`: the model is the policy of an `Orchestrator` episode over the domain's tools (the
  paper's `call_expert` hands a tool-use turn to the expert with the tools) and succeeds when the
  ToolScale evaluation gives reward 1. This is a property of the model, so it is measured once per
  alias and reported under every LLM tool that routes to it; aliases with the same backend and
  price (`smollm2-vote5` is SmolLM2 behind a voting tool) are one agent, measured once and
  reported under each.

Cost comes from catalog prices (the toolbox prices every call), latency is wall time. Calls run in
a thread pool (LLM calls are I/O-bound); results keep the job order, so output is deterministic
for deterministic models. `descriptions.py` turns the figures into descriptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.agent.loop import SYSTEM_PROMPT, Orchestrator
from toolorchestra.core.settings import Settings
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.evaluation import ToolCall
from toolorchestra.envs.evaluation import Trajectory as EnvTrajectory
from toolorchestra.episodes.judge import contains_answer, judge_answer
from toolorchestra.episodes.pool import CATEGORIES, Category, QAItem, TaskPool, ToolUseTask, task_prompt
from toolorchestra.llm.base import LLM
from toolorchestra.tools.catalog import Catalog, ExpertBackend, ToolEntry
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import Toolbox, build_toolbox

_MAX_OUTPUT_CHARS = 400


class DescribeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    samples_per_category: int = Field(8, ge=1, le=10_000)
    tool_use_samples: int | None = Field(None, ge=1, le=10_000, description="tool-use episodes per agent (default "
                                         "samples_per_category): each is several turns of long prompts, "
                                         "a QA call one short one")
    seed: int = 0
    categories: list[Category] = Field(default_factory=lambda: list(CATEGORIES), min_length=1)
    tools: list[str] | None = Field(None, description="LLM tools to measure (default: every LLM tool)")
    max_turns: int = Field(6, ge=1, le=100, description="turns of a tool-use episode")
    max_tokens: int = Field(256, ge=1, le=32_768, description="policy tokens per turn in tool-use episodes")
    max_workers: int = Field(4, ge=1, le=64, description="concurrent calls (LLM calls are I/O-bound)")
    summary_examples: int = Field(6, ge=1, le=50, description="trajectories shown to the summarizer")
    style: Literal["full", "compact"] = Field(
        "full", description="figures in descriptions: `full` (accuracy, tokens, cost, latency per category) or "
                            "`compact` (accuracy and n per category, cost per call: short for a small policy)")
    stated_min_n: int = Field(0, ge=0, le=10_000, description=(
        "compact style: a category's accuracy is stated only when measured on at least this many samples "
        "(0: always); the cost per call always is. The policy reads every description every turn, and "
        "'0% (n=2)' for four categories is ~55 tokens a tool that tell it nothing"))


class Record(BaseModel):
    """One measured call (QA) or episode (tool use; `tool` is empty: the episode measures the model)."""

    tool: str
    model: str
    category: Category
    task_id: str
    correct: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    question: str = ""
    expected: str = ""
    output: str = ""


class CategoryStats(BaseModel):
    n: int
    correct: int
    accuracy: float
    metric: Literal["accuracy", "hit_rate", "success"]
    mean_prompt_tokens: float
    mean_completion_tokens: float
    mean_cost_usd: float
    mean_latency_s: float
    errors: int


def aggregate(records: list[Record], metric: Literal["accuracy", "hit_rate", "success"]) -> CategoryStats:
    n = len(records)

    def mean(values: list[float]) -> float:
        return math.fsum(values) / n if n else 0.0

    correct = sum(r.correct for r in records)
    return CategoryStats(
        n=n, correct=correct, accuracy=correct / n if n else 0.0, metric=metric,
        mean_prompt_tokens=mean([r.prompt_tokens for r in records]),
        mean_completion_tokens=mean([r.completion_tokens for r in records]),
        mean_cost_usd=mean([r.cost_usd for r in records]),
        mean_latency_s=mean([r.latency_s for r in records]),
        errors=sum(r.error is not None for r in records),
    )


@dataclass
class Measurement:
    """Everything `describe_catalog` measured: raw records and per tool/model/category stats."""

    records: list[Record] = field(default_factory=list)
    stats: dict[str, dict[str, dict[str, CategoryStats]]] = field(default_factory=dict)
    """tool -> model alias -> category -> stats (tool-use stats under every tool of the alias)."""
    summaries: dict[tuple[str, str], str] = field(default_factory=dict)
    summary_failures: int = 0

    def rows(self) -> list[dict[str, Any]]:
        """A flat table (one row per tool, model and category) for MLflow and reports."""
        return [
            {"tool": tool, "model": alias, "category": category, **s.model_dump()}
            for tool, models in sorted(self.stats.items())
            for alias, categories in sorted(models.items())
            for category, s in categories.items()
        ]


def llm_tools(catalog: Catalog, only: list[str] | None = None) -> list[ToolEntry]:
    tools = [t for t in catalog.tools if isinstance(t.backend, ExpertBackend)]
    if only is not None:
        known = {t.name for t in tools}
        unknown = sorted(set(only) - known)
        if unknown:
            raise ValueError(f"tools {unknown} are not LLM tools of the catalog; LLM tools: {sorted(known)}")
        tools = [t for t in tools if t.name in set(only)]
    return tools


def _last_output_line(observation: str) -> str:
    _, _, output = observation.rpartition("Output:\n")
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _judge_call(role: str, observation: str, data: Any, gold: Any) -> tuple[bool, str]:
    """(correct, what was judged) for one expert call, by the tool's role."""
    if role in ("answer", "ask", "program", "vote"):
        said = data.get("answer", observation) if isinstance(data, dict) else observation
        return judge_answer(said, gold), said
    if role == "reason":
        line = _last_output_line(observation) if "Output:\n" in observation else ""
        return (judge_answer(line, gold) if line else False), line
    # search: the query line is what the expert wrote, the rest is what retrieval found
    _, _, found = observation.partition("\n")
    return contains_answer(found, gold), found


def _measure_qa(toolbox: Toolbox, entry: ToolEntry, alias: str, item: QAItem, category: Category) -> Record:
    role = entry.backend.role  # type: ignore[union-attr]
    properties = toolbox.tools[entry.name].parameters.get("properties", {})
    arguments: dict[str, Any] = {"model": alias} if "model" in properties else {}
    if "question" in properties:
        arguments["question"] = item.question
    result = toolbox.call(entry.name, arguments, EpisodeContext(task=item.question))
    usage = list(result.usage.values())
    if result.ok or role == "reason":  # a failed program still printed something worth judging
        correct, judged = _judge_call(role, result.observation, result.data, item.answer)
    else:
        correct, judged = False, result.observation
    return Record(
        tool=entry.name, model=alias, category=category, task_id=item.id, correct=correct,
        prompt_tokens=sum(u.prompt_tokens for u in usage), completion_tokens=sum(u.completion_tokens for u in usage),
        cost_usd=result.cost_usd, latency_s=result.latency_s, error=result.error,
        question=item.question, expected=str(item.answer), output=judged[:_MAX_OUTPUT_CHARS],
    )


def run_tool_use_episode(llm: LLM, task: ToolUseTask, *, price: Any, max_turns: int, max_tokens: int) -> tuple[Any, bool, str | None]:
    """One orchestrator episode of `llm` over the task's domain tools, scored by ToolScale's
    evaluation. Returns (agent trajectory, solved, error)."""
    env = DomainEnv(task.domain.domain)
    env.reset(task.task)
    policy = task.domain.policy
    system = SYSTEM_PROMPT + (f"\n\nDomain policy:\n{policy}" if policy else "")
    orchestrator = Orchestrator(llm, Toolbox(env.tools()), policy_price=price, max_turns=max_turns,
                                max_tokens=max_tokens, system_prompt=system, max_workers=1)
    trajectory = orchestrator.run(task_prompt(task.task))
    calls = [ToolCall(name=t.tool, arguments=t.arguments or {}) for t in trajectory.turns if t.tool and t.ok]
    said = [t.text for t in trajectory.turns] + ([trajectory.answer] if trajectory.answer else [])
    result = env.score(EnvTrajectory(tool_calls=calls, messages=said))
    return trajectory, result.reward == 1.0, trajectory.error


def _measure_tool_use(llm: LLM, alias: str, catalog: Catalog, task: ToolUseTask, config: DescribeConfig) -> Record:
    try:
        trajectory, solved, error = run_tool_use_episode(
            llm, task, price=catalog.models[alias].price, max_turns=config.max_turns, max_tokens=config.max_tokens)
    except Exception as exc:  # a broken task must not sink the measurement; it counts as a failure
        return Record(tool="", model=alias, category="tool_use", task_id=task.id, correct=False,
                      error=f"{type(exc).__name__}: {exc}", question=task_prompt(task.task)[:_MAX_OUTPUT_CHARS])
    tokens = trajectory.tokens
    return Record(
        tool="", model=alias, category="tool_use", task_id=task.id, correct=solved,
        prompt_tokens=sum(u.prompt_tokens for u in tokens.values()),
        completion_tokens=sum(u.completion_tokens for u in tokens.values()),
        cost_usd=trajectory.cost_usd, latency_s=trajectory.latency_s, error=error,
        question=task_prompt(task.task)[:_MAX_OUTPUT_CHARS], expected=", ".join(task.task.communicate_info),
        output=(trajectory.answer or trajectory.stop_reason or "")[:_MAX_OUTPUT_CHARS],
    )


def measure(
    catalog: Catalog,
    pool: TaskPool,
    settings: Settings,
    config: DescribeConfig,
    *,
    llm_for: Callable[[str], LLM] | None = None,
) -> Measurement:
    """Run every LLM tool x model alias on the sampled tasks; aggregate per category."""
    from toolorchestra.llm.config import build_llm

    if llm_for is None:
        def llm_for(alias: str) -> LLM:
            return build_llm(catalog.models[alias].backend, settings)

    entries = llm_tools(catalog, config.tools)
    samples = pool.sample(config.samples_per_category, config.seed)
    if config.tool_use_samples is not None:
        samples["tool_use"] = pool.sample(config.tool_use_samples, config.seed)["tool_use"]
    toolbox = build_toolbox(catalog, settings, llm_for=llm_for, only=[e.name for e in entries]) if entries else None
    jobs: list[Callable[[], Record]] = []
    for entry in entries:
        for alias in entry.backend.models:  # type: ignore[union-attr]
            for category in ("qa_arithmetic", "qa_numeric", "qa_lookup"):
                if category in config.categories:
                    jobs.extend(
                        (lambda e=entry, a=alias, i=item, c=category: _measure_qa(toolbox, e, a, i, c))
                        for item in samples[category]
                    )
    aliases = sorted({a for e in entries for a in e.backend.models})  # type: ignore[union-attr]
    same_agent: dict[str, str] = {}  # alias -> the alias whose tool-use episodes stand for it
    for alias in aliases:
        model = catalog.models[alias]
        key = (model.backend.model_dump_json(), model.price.model_dump_json())
        same_agent[alias] = next((a for a in same_agent if a == same_agent[a] and key == (
            catalog.models[a].backend.model_dump_json(), catalog.models[a].price.model_dump_json())), alias)
    if "tool_use" in config.categories:
        for alias in aliases:
            if same_agent[alias] != alias:
                continue
            jobs.extend(
                (lambda a=alias, t=task: _measure_tool_use(llm_for(a), a, catalog, t, config))
                for task in samples["tool_use"]
            )
    # Job order is run order. Starting the long tool-use episodes first (longest-first list
    # scheduling) was measured slower on the demo's data at 8 QA samples per category: 141 vs
    # 124 s on llama.cpp (2026-12-03, AMX Xeon), so they stay last. `map` keeps the job order.
    with ThreadPoolExecutor(max_workers=config.max_workers) as pool_:
        records = list(pool_.map(lambda job: job(), jobs))
    records += [r.model_copy(update={"model": alias}) for alias, agent in same_agent.items() if agent != alias
                for r in list(records) if r.category == "tool_use" and r.model == agent]

    measurement = Measurement(records=records)
    for entry in entries:
        role = entry.backend.role  # type: ignore[union-attr]
        per_model: dict[str, dict[str, CategoryStats]] = {}
        for alias in entry.backend.models:  # type: ignore[union-attr]
            per_category: dict[str, CategoryStats] = {}
            for category in config.categories:
                if category == "tool_use":
                    rows = [r for r in records if r.category == "tool_use" and r.model == alias]
                    metric = "success"
                else:
                    rows = [r for r in records if r.tool == entry.name and r.model == alias and r.category == category]
                    metric = "hit_rate" if role == "search" else "accuracy"
                if rows:
                    per_category[category] = aggregate(rows, metric)  # type: ignore[arg-type]
            per_model[alias] = per_category
        measurement.stats[entry.name] = per_model
    return measurement


