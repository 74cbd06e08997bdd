"""The methods an evaluation compares: the trained orchestrator and the baselines, run in the same
evaluation on the same tasks, tools and prices.

- **trained orchestrator** (`role="candidate"`): the checkpoint under evaluation, with every tool
  of its catalog;
- **champion**: the registry's current champion, evaluated again here so the promotion gate
  compares like with like;
- **prompted orchestrator**: the untrained base model in the same loop with the same system
  prompt, tools and prices (what training adds);
- **SFT only** (`sft_only`): the warm-start checkpoint before GRPO, same loop (what GRPO adds);
- **each expert alone** (`expert:<alias>`): a catalog model as a monolithic agent: it is the
  policy itself, with the domain tools and the basic (non-LLM) tools but no other model to call,
  its tokens priced at its catalog price (the paper's "basic tools" setting). The report marks the
  strongest (best accuracy) and the cheapest (lowest mean cost) of them;
  Aliases with the same backend (e.g. `smollm2-vote5`, SmolLM2 behind a voting tool) would be the
  same monolithic agent, so only the first of them (by name) gets a method;
- **random router**: at every turn it calls one of the offered LLM tools chosen uniformly at random
  with a model drawn uniformly from that tool's models (tools without a `model` argument ask
  their one model), so the task goes to random experts; on the last allowed turn it calls a tool
  that can end the task (an `answer`, `program` or `vote` expert) when one is offered. Seeded by
  the task, so repeatable. It routes the way an orchestrator can, without learning: the floor
  that routing must beat. It never calls domain tools (it cannot fill their arguments), so it
  solves tool-use tasks only when nothing has to be done in the database;
- **always strongest** (`always_strongest`): on the first turn it calls the strongest expert (an
  (expert tool, model) that can end the task): the best measured QA accuracy in the tool's
  describe-stage `stats` (correct / n pooled over the accuracy categories), else, with nothing
  measured, the highest price per call. If that call does not end the task it stops with a
  plain "no answer" message;
- **cascade**: cheapest expert first (measured mean cost per call, else the nominal price of a
  call); whenever it is asked for another turn (the last expert abstained, its program failed or
  printed nothing, or the call failed) it escalates to the next pricier expert not yet asked, and
  stops when none is left (within the episode's `max_turns`).

Both fixed routes see only the offered tools; a strongest or cheapest expert the method is not
offered is skipped. The price of an (expert tool, model) without measurements is the tool's
per-call price and that of the tool it runs inside (a program's sandbox), plus `samples` x
(`NOMINAL_PROMPT_TOKENS` + `max_tokens`) tokens at the model's catalog price, so a 5-sample vote
prices at about 5 direct answers.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM, BatchLLM, Completion, Message, Usage, tools_by_row
from toolorchestra.llm.config import LocalEngine
from toolorchestra.llm.hermes import MalformedToolCall, format_tool_call, parse_tool_call
from toolorchestra.tools.catalog import Catalog, ExpertBackend
from toolorchestra.tools.experts import FINAL_ROLES

Role = Literal["candidate", "champion", "orchestrator", "expert", "random", "fixed"]
NOMINAL_PROMPT_TOKENS = 256
"""Prompt tokens assumed for an unmeasured expert call when ranking experts by price."""


@dataclass
class Method:
    """One row of the report."""

    name: str
    role: Role
    policy: LLM
    policy_alias: str | None
    """Catalog model whose prices the policy's own tokens cost (None: the catalog's policy model)."""
    tools: Literal["all", "basic"] = "all"
    """`all` catalog tools, or only the `basic` (non-LLM) ones: an expert working alone."""
    description: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    policy_on: Callable[[Callable[[str], LLM]], LLM] | None = None
    """The policy on a method worker's own catalog backends (`llm_for`), when the policy is a
    catalog model (an expert alone): each worker then decodes it on its own engine."""

    def policy_for(self, llm_for: Callable[[str], LLM] | None) -> LLM:
        """The policy a method worker runs, given its catalog backends (None: the shared ones)."""
        if self.policy_on is None or llm_for is None:
            return self.policy
        return self.policy_on(llm_for)

    def offered(self, catalog: Catalog) -> list[str]:
        if self.tools == "all":
            return [t.name for t in catalog.tools]
        return [t.name for t in catalog.tools if t.kind != "llm" and not isinstance(t.backend, ExpertBackend)]


def orchestrator(name: str, policy: LLM, *, policy_alias: str | None, role: Role = "orchestrator",
                 description: str = "", **info: Any) -> Method:
    return Method(name=name, role=role, policy=policy, policy_alias=policy_alias, tools="all",
                  description=description, info=dict(info))


def expert_aliases(catalog: Catalog) -> list[str]:
    """The catalog's expert models: those an LLM tool routes to (all models when no tool does),
    one per distinct backend (the first by name)."""
    used = sorted({a for t in catalog.tools if isinstance(t.backend, ExpertBackend) for a in t.backend.models})
    seen: set[str] = set()
    out = []
    for alias in used or sorted(catalog.models):
        backend = catalog.models[alias].backend.model_dump_json()
        if backend not in seen:
            seen.add(backend)
            out.append(alias)
    return out


def expert_methods(catalog: Catalog, llm_for: Any, aliases: list[str] | None = None) -> list[Method]:
    """One `expert:<alias>` method per expert model; `llm_for(alias)` builds its backend."""
    chosen = expert_aliases(catalog) if aliases is None else list(aliases)
    unknown = sorted(set(chosen) - set(catalog.models))
    if unknown:
        from toolorchestra.core.errors import ConfigError

        raise ConfigError(None, f"experts {unknown} are not catalog models; known: {sorted(catalog.models)}",
                          key="methods.experts")
    return [Method(name=f"expert:{alias}", role="expert", policy=llm_for(alias), policy_alias=alias, tools="basic",
                   description=f"{alias} alone, with the domain and basic tools", info={"alias": alias},
                   policy_on=lambda models, alias=alias: models(alias))
            for alias in chosen]


def random_router(catalog: Catalog, *, seed: int, max_turns: int) -> Method:
    policy = RandomRouterPolicy(catalog, seed=seed, max_turns=max_turns)
    return Method(name="random_router", role="random", policy=policy, policy_alias=None, tools="all",
                  description="uniformly random LLM tool and model each turn")


@dataclass(frozen=True)
class ExpertChoice:
    """One (expert tool, model) a fixed route can call, with what ranks it."""

    tool: str
    alias: str
    accuracy: float | None
    """Measured QA accuracy (describe stage), None when unmeasured."""
    n: int
    price: float
    """USD per call: measured mean, else nominal (module docstring)."""


def expert_choices(catalog: Catalog) -> list[ExpertChoice]:
    """Every (tool, model) of an expert tool that can end the task, in catalog order."""
    out = []
    for entry in catalog.tools:
        backend = entry.backend
        if not isinstance(backend, ExpertBackend) or backend.role not in FINAL_ROLES:
            continue
        measured = entry.stats.get("models", {}) if isinstance(entry.stats, dict) else {}
        for alias in backend.models:
            rows = [s for s in (measured.get(alias) or {}).values()
                    if isinstance(s, dict) and s.get("metric") == "accuracy" and s.get("n")]
            n = sum(int(s["n"]) for s in rows)
            accuracy = sum(int(s["correct"]) for s in rows) / n if n else None
            if n:
                price = sum(float(s["mean_cost_usd"]) * int(s["n"]) for s in rows) / n
            else:
                tokens = Usage(prompt_tokens=NOMINAL_PROMPT_TOKENS * backend.samples_per_call,
                                completion_tokens=backend.max_tokens * backend.samples_per_call)
                inner = sum(catalog.tool(t).price.per_call for t in catalog.inner_tools(entry))
                price = entry.price.per_call + inner + catalog.models[alias].price.tokens_cost(tokens)
            out.append(ExpertChoice(tool=entry.name, alias=alias, accuracy=accuracy, n=n, price=price))
    return out


def strongest_expert(choices: list[ExpertChoice]) -> ExpertChoice | None:
    """Best measured accuracy (pricier on ties: more compute), else the highest price."""
    measured = [c for c in choices if c.accuracy is not None]
    if measured:
        return max(measured, key=lambda c: (c.accuracy, c.price))
    return max(choices, key=lambda c: c.price, default=None)


def cascade_order(choices: list[ExpertChoice]) -> list[ExpertChoice]:
    """Cheapest first (catalog order on ties)."""
    return sorted(choices, key=lambda c: c.price)


def always_strongest(catalog: Catalog) -> Method:
    best = strongest_expert(expert_choices(catalog))
    route = [best] if best is not None else []
    basis = "no expert tool" if best is None else (
        f"{best.tool} ({best.alias}): " + (f"measured accuracy {best.accuracy:.2f} on n={best.n}"
                                           if best.accuracy is not None else "the highest price (unmeasured)"))
    return Method(name="always_strongest", role="fixed", policy=FixedRoutePolicy(route, name="always-strongest"),
                  policy_alias=None, tools="all", description=f"always the strongest expert: {basis}",
                  info={"route": [f"{c.tool}:{c.alias}" for c in route]})


def cascade(catalog: Catalog, *, max_turns: int) -> Method:
    route = cascade_order(expert_choices(catalog))[:max_turns]
    return Method(name="cascade", role="fixed", policy=FixedRoutePolicy(route, name="cascade", escalate=True),
                  policy_alias=None, tools="all",
                  description="cheapest expert first, escalating when it gives no answer: "
                              + " -> ".join(c.tool for c in route),
                  info={"route": [f"{c.tool}:{c.alias}" for c in route]})


def mark_extremes(summary: dict[str, dict[str, Any]], methods: list[Method]) -> dict[str, list[str]]:
    """Labels for the report: the strongest expert (best overall accuracy, cheaper on ties) and the
    cheapest (lowest mean cost, more accurate on ties)."""
    experts = [m.name for m in methods if m.role == "expert" and m.name in summary]
    labels: dict[str, list[str]] = {m.name: [] for m in methods}
    if not experts:
        return labels
    overall = {name: summary[name]["overall"] for name in experts}
    strongest = max(experts, key=lambda n: (overall[n].accuracy, -overall[n].cost_mean))
    cheapest = min(experts, key=lambda n: (overall[n].cost_mean, -overall[n].accuracy))
    labels[strongest].append("strongest")
    labels[cheapest].append("cheapest")
    return labels


# ------------------------------------------------------------------------------ policies


class RandomRouterPolicy(BatchLLM):
    """The random router as a policy: writes one Hermes call per turn (see the module docstring)."""

    concurrent_episodes = True  # no model: each call is instant and thread-safe (seeded per task and turn)

    def __init__(self, catalog: Catalog, *, seed: int = 0, max_turns: int = 4) -> None:
        self.model = "random-router"
        self.seed, self.max_turns = seed, max_turns
        self.roles = {t.name: t.backend.role for t in catalog.tools if isinstance(t.backend, ExpertBackend)}
        self.final = {name for name, role in self.roles.items() if role in FINAL_ROLES}

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:  # stop: no text generated
        row_tools = tools_by_row(batch, tools, tools_per_row)
        return [self._route(messages, specs or []) for messages, specs in zip(batch, row_tools, strict=True)]

    def _route(self, messages: list[Message], specs: list[dict[str, Any]]) -> Completion:
        offered = [s["function"] for s in specs if s.get("function", {}).get("name") in self.roles]
        if not offered:
            return Completion(text="I cannot solve this task with the tools I have.", model=self.model,
                              finish_reason="stop")
        task = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        digest = hashlib.sha256(task.encode()).hexdigest()[:16]
        rng = random.Random(f"{self.seed}:{digest}:{turn}")
        answers = [f for f in offered if f["name"] in self.final]
        pool = answers if answers and turn >= self.max_turns - 1 else offered
        function = rng.choice(pool)
        properties = (function.get("parameters") or {}).get("properties") or {}
        arguments: dict[str, Any] = {}
        models = (properties.get("model") or {}).get("enum") or []
        if models:
            arguments["model"] = rng.choice(sorted(models))
        if "question" in ((function.get("parameters") or {}).get("required") or []):
            arguments["question"] = task
        return Completion(text=format_tool_call(function["name"], arguments), usage=Usage(), model=self.model,
                          finish_reason="stop")


def _called(messages: list[Message]) -> list[tuple[str, Any]]:
    """(tool, model argument) of every call the assistant turns made so far."""
    out = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        structured = message.get("tool_calls") or []
        if structured:
            function = structured[0].get("function", {})
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            out.append((function.get("name"), arguments.get("model") if isinstance(arguments, dict) else None))
            continue
        try:
            call = parse_tool_call(str(message.get("content") or ""))
        except MalformedToolCall:
            call = None
        if call is not None:
            out.append((call.name, call.arguments.get("model")))
    return out


class FixedRoutePolicy(BatchLLM):
    """A fixed route over experts as a policy (`always_strongest`, `cascade`): it writes one Hermes
    call per turn, to the first expert of `route` not yet asked (with `escalate`), or only on the
    first turn; then a plain message that it has no answer."""

    GIVE_UP = "No expert gave an answer."
    concurrent_episodes = True  # no model: each call is instant and thread-safe

    def __init__(self, route: list[ExpertChoice], *, name: str, escalate: bool = False) -> None:
        self.model, self.route, self.escalate = name, list(route), escalate

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:  # stop: no text generated
        row_tools = tools_by_row(batch, tools, tools_per_row)
        return [self._next(messages, specs or []) for messages, specs in zip(batch, row_tools, strict=True)]

    def _next(self, messages: list[Message], specs: list[dict[str, Any]]) -> Completion:
        offered = {s["function"]["name"]: s["function"] for s in specs if s.get("function", {}).get("name")}
        called = _called(messages)
        if called and not self.escalate:
            return Completion(text=self.GIVE_UP, model=self.model, finish_reason="stop")
        for choice in self.route:
            function = offered.get(choice.tool)
            if function is None:
                continue
            parameters = function.get("parameters") or {}
            has_model = "model" in (parameters.get("properties") or {})
            if (choice.tool, choice.alias if has_model else None) in called:
                continue
            arguments: dict[str, Any] = {"model": choice.alias} if has_model else {}
            if "question" in (parameters.get("required") or []):
                arguments["question"] = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
            return Completion(text=format_tool_call(choice.tool, arguments), usage=Usage(), model=self.model,
                              finish_reason="stop")
        return Completion(text=self.GIVE_UP, model=self.model, finish_reason="stop")


CANDIDATE, CHAMPION = "trained", "champion"
"""Method names of the orchestrator under evaluation and of the re-evaluated champion."""


class MethodsConfig(BaseModel):
    """Which baselines an evaluation runs beside the candidate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    champion: bool = True
    prompted: bool = True
    experts: list[str] | Literal["all"] = Field("all", description="catalog model aliases, `all`, or [] for none")
    random_router: bool = True
    always_strongest: bool = True
    cascade: bool = True
    sft_only: bool = Field(True, description="the warm start before GRPO, when the evaluate stage has deps.warm_start")


def build_methods(config: MethodsConfig, *, candidate: Any, champion: Any | None, champion_note: str,
                  catalog: Catalog, settings: Settings, llm_for: Callable[[str], LLM], seed: int, max_turns: int,
                  device: str = "auto", engine: LocalEngine | None = None) -> tuple[list[Method], dict[str, Any], list[str]]:
    """(methods, champion info for the report, notes). `candidate` and `champion` are loaded
    orchestrators (`llm`, `manifest`, `ref`; the registry's `Candidate` / `RegisteredModel`); `engine`
    runs the prompted base model on another local engine (`llm.config.on_engine`)."""
    from toolorchestra.llm.config import LocalLLMConfig, build_llm, on_engine

    manifest = candidate.manifest
    alias = manifest.get("policy_alias") or catalog.policy
    notes: list[str] = []
    out = [orchestrator(CANDIDATE, candidate.llm, policy_alias=alias, role="candidate",
                        description=f"the trained orchestrator ({candidate.ref})", model=candidate.ref,
                        weights_sha256=candidate.sha)]
    champion_info: dict[str, Any] = {}
    if champion is not None:
        out.append(orchestrator(CHAMPION, champion.llm, policy_alias=champion.policy_alias, role="champion",
                                description=f"the current champion ({champion.ref})", model=champion.ref,
                                version=champion.version))
        champion_info = {"method": CHAMPION, "version": champion.version, "ref": champion.ref,
                         "weights_sha256": champion.manifest.get("weights_sha256")}
    elif champion_note:
        notes.append(champion_note)
    if config.prompted:
        base = manifest.get("base_model")
        if base:
            policy = build_llm(on_engine(LocalLLMConfig(model=str(base), device=device), engine), settings)
            out.append(orchestrator("prompted", policy, policy_alias=alias,
                                    description=f"the untrained base model `{base}`, prompted"))
        else:
            notes.append("the checkpoint names no base model: the prompted orchestrator was skipped")
    if config.experts:
        chosen = None if config.experts == "all" else list(config.experts)
        out.extend(expert_methods(catalog, llm_for, chosen))
    if config.random_router:
        out.append(random_router(catalog, seed=seed, max_turns=max_turns))
    if config.always_strongest or config.cascade:
        if not expert_choices(catalog):
            notes.append("the catalog has no expert tool that can end the task: always_strongest and cascade "
                         "were skipped")
        else:
            if config.always_strongest:
                out.append(always_strongest(catalog))
            if config.cascade:
                out.append(cascade(catalog, max_turns=max_turns))
    return out, champion_info, notes
