"""Episodes over instances: tools, the agent loop, and scoring (training and evaluation alike).

`RolloutEnvironment.run(policy, instances)` plays one episode per instance, all in lockstep (one
batched generation per turn), with the project's agent loop (`toolorchestra.agent.loop`):

- **tool-use** instances get a fresh live database of their domain (`DomainEnv`, reset to the
  task's initial state) whose declarative tools are offered, plus the catalog tools the instance
  offers (the LLM experts, `call_expert`-style);
- **QA** instances get the catalog tools the instance offers (`search`, `enhance_reasoning`,
  `answer`, ...).

Each episode starts from its instance's prompt with its own toolbox (its own database state, the
instance's tools and prices): the loop's per-episode `start(toolbox=, messages=)`. Each finished
episode is scored by `score_rollout`, the one scorer shared with evaluation: a tool-use task by
ToolScale's three criteria (database hash, communicated values, golden actions), a QA task by the
rule-based answer judge. A `Rollout`
carries what the reward reads: `metrics()` (`calls/<tool>`, `cost`, `latency`), `correct`, and
`valid` (format-valid and answered; the reward counts an invalid rollout as a wrong one of its
group).

`golden_conversation(instance)` replays a tool-use task's golden actions through the same tools
and renders them as Hermes calls with their real observations plus a final reply that states the
`communicate_info` values: the SFT warm start's data. `golden_first_call(instance)` is a task's
first golden call alone (the warm start's first-call examples, from tasks too long to train whole).

Departures from the paper's setup, for small models on CPU: observations are truncated to
`max_observation_chars`, and `max_domain_tools` caps the domain tools offered (the golden ones are
always kept, the rest are a seeded sample) so prompts stay short.
"""

from __future__ import annotations

import copy
import logging
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.trajectory import Trajectory, Turn, reused_prompt_tokens
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.envs.records import MODULE
from toolorchestra.episodes.instance import DomainLocator, Instance
from toolorchestra.llm.base import LLM, Message
from toolorchestra.llm.hermes import format_tool_call, strip_tool_calls
from toolorchestra.tools.catalog import Catalog, Price
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import Toolbox

# The reward's weights for an instance without a user preference: outcome and efficiency, as the
# paper's reward always has. The assembly writes a per-instance perturbation of this vector into
# every such instance (`Instance.default_preference`); this is the fallback for instances built
# elsewhere. Cost and latency are min-max normalised per group, so a right rollout gains at most
# 0.5 over another right one and never overtakes the accuracy term.
log = logging.getLogger(__name__)

DEFAULT_PREFERENCE = {"accuracy": 1.0, "cost": 0.3, "latency": 0.2}


class EpisodeConfig(BaseModel):
    """How episodes run during training (and evaluation of a trained policy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_turns: int = Field(4, ge=1, le=100)
    max_tokens: int = Field(96, ge=8, le=32_768, description="new tokens per orchestrator turn")
    max_observation_chars: int = Field(800, ge=64, le=1_000_000)
    max_domain_tools: int | None = Field(6, ge=1, le=1_000, description="None: every domain tool the instance offers")
    max_workers: int = Field(8, ge=1, le=256)
    default_preference: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_PREFERENCE))
    """The reward's weights for an instance with neither a preference nor its own default."""
    policy_alias: str | None = Field(None, description="catalog model whose prices the policy's tokens cost")
    final_answer_line: bool | None = Field(None, description=(
        "whether a program's one printed value ends the task (the code interpreter's `final_answer_line`); "
        "None: as the catalog says"))


@dataclass(repr=False)
class Rollout:
    """One finished episode and its outcome."""

    instance: Instance
    trajectory: Trajectory
    tools: list[dict[str, Any]]
    correct: bool
    answered: bool
    details: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:  # short: TRL prints rollouts it got no reward for
        return (f"Rollout({self.instance.id!r}, correct={self.correct}, valid={self.valid}, "
                f"turns={len(self.trajectory.turns)}, stop={self.trajectory.stop_reason})")

    @property
    def format_valid(self) -> bool:
        return self.trajectory.format_valid

    @property
    def valid(self) -> bool:
        """Scored by the reward: every call well formed and the episode gave an answer."""
        return self.format_valid and self.answered

    def metrics(self) -> dict[str, float]:
        return self.trajectory.metrics()


# ------------------------------------------------------------------------------ scoring


def said_to_user(trajectory: Trajectory) -> list[str]:
    """What the orchestrator told the user: its text outside tool calls, and the final answer."""
    said = [strip_tool_calls(t.text) for t in trajectory.turns if t.text]
    if trajectory.answer and trajectory.stop_reason == "answer_tool":
        said.append(trajectory.answer)  # an expert's final reply is delivered to the user
    return [s for s in said if s]


def answered(trajectory: Trajectory) -> bool:
    return trajectory.stop_reason in ("answer_tool", "final_message") and bool((trajectory.answer or "").strip())


def score_rollout(instance: Instance, trajectory: Trajectory, env: Any = None) -> tuple[bool, dict[str, Any]]:
    """(correct, details). A tool-use instance needs its episode's live `DomainEnv`."""
    if instance.kind == "qa":
        from toolorchestra.episodes.judge import judge_answer

        ok = answered(trajectory) and judge_answer(trajectory.answer, instance.answer)
        return ok, {"answer": trajectory.answer, "gold": instance.answer}
    from toolorchestra.envs.evaluation import ToolCall
    from toolorchestra.envs.evaluation import Trajectory as EnvTrajectory

    if env is None:
        raise ValueError("scoring a tool-use rollout needs its DomainEnv")
    calls = [ToolCall(name=t.tool, arguments=t.arguments or {}) for t in trajectory.turns if t.tool and t.ok]
    result = env.score(EnvTrajectory(tool_calls=calls, messages=said_to_user(trajectory)))
    details = {"db": result.db, "action": result.action, "communicate": result.communicate,
               "missing_communicate": result.missing_communicate, "unmatched_actions": result.unmatched_actions}
    return result.reward == 1.0, details


# ------------------------------------------------------------------------------ per-episode tools



def scope_to_domain(tool: Any, domain: str, records: tuple[dict[str, bytes], str] | None) -> Any:
    """Local search restricted to `domain` (its records only); the code interpreter with the
    domain's `records` (`envs.records.sandbox_files`: the tool counts and aggregates
    need) when given; other tools as they are. Episodes and `orchestra ask --domain` use it."""
    from toolorchestra.tools.code_interpreter import CodeInterpreter
    from toolorchestra.tools.local_search import LocalSearch

    if isinstance(tool, LocalSearch):
        return tool.scoped(domain)
    if isinstance(tool, CodeInterpreter) and records is not None:
        return tool.with_files(records[0], preload=MODULE, note=records[1])
    return tool


@dataclass
class EpisodeSetup:
    """One episode's instance, toolbox (with its own database when tool use) and tool schemas."""

    instance: Instance
    toolbox: Toolbox
    specs: list[dict[str, Any]]
    env: Any = None


# ------------------------------------------------------------------------------ environment


class RolloutEnvironment:
    """Builds each instance's tools and runs episodes with the agent loop."""

    def __init__(
        self,
        catalog: Catalog,
        settings: Settings,
        domains: DomainLocator,
        config: EpisodeConfig | None = None,
        *,
        llm_for: Callable[[str], LLM] | None = None,
    ) -> None:
        self.config = config or EpisodeConfig()
        if self.config.final_answer_line is not None:
            catalog = catalog.with_final_answer_line(self.config.final_answer_line)
        self.catalog, self.settings, self.domains = catalog, settings, domains
        self.llm_for = llm_for
        self._catalog_tools: Toolbox | None = None
        self._catalog_names: set[str] = set()
        self._records: dict[str, tuple[dict[str, bytes], str] | None] = {}
        self._building = threading.RLock()  # episodes may start from several threads: tools are built once

    # -- tools

    def catalog_toolbox(self, names: list[str]) -> Toolbox:
        """The catalog's tools, built once (experts load their models on first use)."""
        with self._building:
            return self._catalog_toolbox(names)

    def _catalog_toolbox(self, names: list[str]) -> Toolbox:
        missing = set(names) - self._catalog_names
        if missing:
            from toolorchestra.tools.toolbox import build_toolbox

            unknown = missing - {t.name for t in self.catalog.tools}
            if unknown:
                raise ConfigError(None, f"instances offer tools {sorted(unknown)} that the catalog lacks; "
                                  f"known: {[t.name for t in self.catalog.tools]}", key="catalog")
            self._catalog_names |= missing
            self._catalog_tools = build_toolbox(self.catalog, self.settings, llm_for=self.llm_for,
                                                only=sorted(self._catalog_names))
        assert self._catalog_tools is not None or not names
        return self._catalog_tools if self._catalog_tools is not None else Toolbox([])

    def scoped(self, tool: Any, instance: Instance) -> Any:
        """`tool` for this episode (`scope_to_domain`). A tool-use episode's code runs without the
        records: its database changes during the episode, and a copy would go stale."""
        if not instance.domain:
            return tool
        records = self.records_files(instance.domain) if instance.kind == "qa" else None
        return scope_to_domain(tool, instance.domain, records)

    def records_files(self, domain: str) -> tuple[dict[str, bytes], str] | None:
        """The domain's sandbox files and description note, built once; None (with one warning)
        when its database cannot be found (QA items naming a domain that has no folder)."""
        with self._building:
            if domain not in self._records:
                from toolorchestra.envs.records import sandbox_files

                try:
                    self._records[domain] = sandbox_files(self.domains.domain(domain))
                except ConfigError as exc:
                    log.warning("the code interpreter runs without %s's records: %s", domain, exc)
                    self._records[domain] = None
            return self._records[domain]

    def offered_domain_tools(self, instance: Instance) -> list[str]:
        """The instance's domain tools, capped at `max_domain_tools` (golden ones always kept)."""
        names = list(instance.domain_tools)
        cap = self.config.max_domain_tools
        if cap is None or len(names) <= cap:
            return names
        required = [n for n in names if n in set(instance.required_tools)]
        rest = [n for n in names if n not in set(required)]
        rng = random.Random(f"tools:{instance.id}")
        keep = set(required) | set(rng.sample(rest, max(0, min(len(rest), cap - len(required)))))
        return [n for n in names if n in keep]

    def setup(self, instance: Instance) -> EpisodeSetup:
        """A fresh episode's toolbox (its own database state when it is a tool-use task)."""
        tools = []
        env = None
        if instance.kind == "tool_use":
            from toolorchestra.envs.domain_tools import DomainEnv

            if not instance.domain:
                raise ConfigError(None, f"tool-use instance {instance.id} names no domain", key="domain")
            env = DomainEnv(self.domains.domain(instance.domain))
            env.reset(instance.tau2_task)
            offered = set(self.offered_domain_tools(instance))
            tools.extend(t for t in env.tools() if t.name in offered)
        catalog_box = self.catalog_toolbox(instance.catalog_tools) if instance.catalog_tools else None
        if catalog_box is not None:
            tools.extend(self.scoped(catalog_box.tools[name], instance) for name in instance.catalog_tools)
        model_prices = {**self.catalog.model_prices(), **instance.model_prices}
        # catalog prices under the instance's: an expert's sandbox run is billed even when the
        # code tool itself is not offered
        tool_prices = {**self.catalog.tool_prices(), **instance.tool_prices}
        box = Toolbox(tools, prices=tool_prices, model_prices=model_prices,
                      max_observation_chars=self.config.max_observation_chars)
        return EpisodeSetup(instance=instance, toolbox=box, specs=box.specs(), env=env)

    def policy_price(self, instance: Instance) -> Price:
        alias = self.config.policy_alias or self.catalog.policy
        if alias is None:
            return Price()
        return instance.model_prices.get(alias) or (self.catalog.models[alias].price if alias in self.catalog.models else Price())

    def preference(self, instance: Instance) -> dict[str, float]:
        """The reward's weights: the user's preference, else the instance's default vector (the
        assembly's, perturbed per instance), else the configured fallback."""
        if instance.preference:
            return dict(instance.preference.vector)
        return dict(instance.default_preference or self.config.default_preference)

    # -- episodes

    def run(self, policy: LLM, instances: list[Instance], *, temperature: float = 1.0,
            seed: int | None = None) -> list[Rollout]:
        """One episode per instance (repeat an instance for a GRPO group), in lockstep: each
        episode starts from its instance's prompt with its own toolbox."""
        if not instances:
            return []
        setups = [self.setup(i) for i in instances]
        # The policy's tokens are priced per instance below, after the run.
        loop = Orchestrator(policy, Toolbox([]), policy_price=Price(), max_turns=self.config.max_turns,
                            max_tokens=self.config.max_tokens, temperature=temperature, seed=seed,
                            max_workers=self.config.max_workers)
        episodes = []
        for setup in setups:
            episode = loop.start(setup.instance.question, toolbox=setup.toolbox, messages=setup.instance.prompt)
            if hasattr(policy, "bind"):  # a policy that records per-transcript state (RolloutPolicy)
                policy.bind(episode.messages, setup.specs)
            episodes.append(episode)
        trajectories = loop.run_episodes(episodes)
        rollouts = []
        for setup, trajectory in zip(setups, trajectories, strict=True):
            price = self.policy_price(setup.instance)
            for i, turn in enumerate(trajectory.turns):  # the policy's own tokens, at this instance's price
                turn.cost_usd += price.tokens_cost(turn.policy_usage, reused_prompt_tokens(trajectory.turns[:i]))
            trajectory.preference = setup.instance.preference.instruction if setup.instance.preference else None
            correct, details = score_rollout(setup.instance, trajectory, setup.env)
            rollouts.append(Rollout(instance=setup.instance, trajectory=trajectory, tools=setup.specs,
                                    correct=correct, answered=answered(trajectory), details=details))
        return rollouts

    # -- golden trajectories (SFT)

    def golden_conversation(self, instance: Instance) -> tuple[list[Message], list[dict[str, Any]]] | None:
        """A golden trajectory as the policy should write it, replayed through the episode's real
        tools, or None when the instance has none or its replay is not scored correct:

        - tool use: the golden actions as Hermes calls with their observations, then a reply that
          states the values to communicate;
        - QA with a `program` (calculations; counts and aggregates over the domain's records,
          which the episode's code interpreter holds): one `code_interpreter` call running it, then
          the printed value as the answer;
        - QA lookup: one `local_search` call with the question's quoted key values (scoped to the
          item's domain), then the gold answer, kept only when the retrieved passage is the record
          the question names (its quoted key values) and shows the answer: read, not recalled.

        Each needs its tool offered by the instance; other QA items have no golden trajectory."""
        if instance.kind == "tool_use":
            calls = [(a.name, copy.deepcopy(a.arguments)) for a in instance.tau2_task.actions]
            info = instance.tau2_task.communicate_info
            return self._replay(instance, calls, lambda _: "Done." + (
                f" The information you asked for: {'; '.join(info)}." if info else ""))
        from toolorchestra.episodes.pool import qa_category

        category = qa_category(_qa_item(instance))
        if instance.task.get("program") and CODE_TOOL in instance.catalog_tools:
            return self._replay(instance, [(CODE_TOOL, {"code": instance.task["program"]})],
                                lambda seen: printed_answer(seen[-1]))
        if category == "qa_lookup" and SEARCH_TOOL in instance.catalog_tools:
            gold = str(instance.answer)

            def read_off(seen: list[str]) -> str:
                return gold if lookup_shown(seen[-1], instance.question, gold) else ""

            return self._replay(instance, [(SEARCH_TOOL, {"query": lookup_query(instance.question)})], read_off)
        return None

    def golden_recovery(self, instance: Instance, broken: str) -> tuple[list[Message], list[dict[str, Any]]] | None:
        """A QA item's golden program after a failed first try: `broken` (a wrong program) run in
        the episode's code interpreter, its real error, then the golden program and its printed
        answer. None when the item has no program or code tool, `broken` does not fail, or the rest
        is not scored correct. The warm start trains the retry, not the broken call
        (`TranscriptEncoder.encode(..., context_turns=1)`): the golden data otherwise never shows
        a failed call, and the policy answered "1" (from `exit status: 1`) after one."""
        if instance.kind != "qa" or not instance.task.get("program") or CODE_TOOL not in instance.catalog_tools:
            return None
        return self._replay(instance, [(CODE_TOOL, {"code": broken}), (CODE_TOOL, {"code": instance.task["program"]})],
                            lambda seen: printed_answer(seen[-1]), failed=1)

    def golden_first_call(self, instance: Instance) -> tuple[list[Message], list[dict[str, Any]]] | None:
        """A tool-use task's first golden call alone, as the policy's first turn (the prompt, then
        the call), when it succeeds on the task's fresh database; None otherwise. From tasks too
        long to train whole, it teaches what a ticket's first turn needs: a domain tool with that
        tool's own parameters."""
        if instance.kind != "tool_use" or not instance.tau2_task.actions:
            return None
        action = instance.tau2_task.actions[0]
        played = self._play(instance, [(action.name, copy.deepcopy(action.arguments))])
        if not played.trajectory.turns[0].ok:
            return None
        return played.messages[:-1], played.setup.specs  # the call, without its observation

    def _play(self, instance: Instance, calls: list[tuple[str, dict[str, Any]]]) -> _Played:
        """Run `calls` through a fresh setup of the instance's tools, each as the policy's turn and
        its observation."""
        setup = self.setup(instance)
        played = _Played(setup, [dict(m) for m in instance.prompt], Trajectory(task=instance.question))
        context = EpisodeContext(task=instance.question)
        for index, (name, arguments) in enumerate(calls):
            text = format_tool_call(name, arguments)
            result = setup.toolbox.call(name, arguments, context)
            played.messages.append({"role": "assistant", "content": text})
            played.messages.append({"role": "tool", "content": result.observation})
            played.trajectory.turns.append(Turn(index=index, text=text, tool=name, arguments=arguments,
                                                observation=result.observation, ok=result.ok))
        return played

    def _replay(self, instance: Instance, calls: list[tuple[str, dict[str, Any]]],
                reply_for: Callable[[list[str]], str], *,
                failed: int = 0) -> tuple[list[Message], list[dict[str, Any]]] | None:
        """Run `calls` through the instance's tools, then reply `reply_for(observations)`; the
        conversation if that trajectory is scored correct. The first `failed` calls must fail
        (a recovery's wrong tries); for QA every later one must work."""
        played = self._play(instance, calls)
        turns = played.trajectory.turns
        if any(turn.ok for turn in turns[:failed]):
            return None
        if instance.kind == "qa" and not all(turn.ok for turn in turns[failed:]):  # a QA golden call must work
            return None
        reply = reply_for([turn.observation for turn in turns])
        if not reply:
            return None
        played.messages.append({"role": "assistant", "content": reply})
        turns.append(Turn(index=len(turns), text=reply))
        played.trajectory.answer, played.trajectory.stop_reason = reply, "final_message"
        correct, _ = score_rollout(instance, played.trajectory, played.setup.env)
        return (played.messages, played.setup.specs) if correct else None


@dataclass
class _Played:
    """Golden calls run through an episode's tools: the setup they ran in, the conversation so far
    (the prompt, then each call and its observation) and the same as a trajectory."""

    setup: EpisodeSetup
    messages: list[Message]
    trajectory: Trajectory

CODE_TOOL, SEARCH_TOOL = "code_interpreter", "local_search"
"""The basic tools QA golden trajectories call (catalog names of the embedded catalog)."""
CATEGORY_TOOLS: dict[str, tuple[str, ...]] = {"qa_arithmetic": (CODE_TOOL,), "qa_lookup": (SEARCH_TOOL,)}
"""QA category -> the basic tools that solve it: the assembly offers them with every item of that
category, and its golden trajectory calls them."""
QA_BASIC_TOOLS: tuple[str, ...] = tuple(dict.fromkeys(t for tools in CATEGORY_TOOLS.values() for t in tools))
"""Every basic tool some QA category needs: the assembly offers all of them with every QA item, so
the question, not which basic tool happens to be offered, decides the call."""


def printed_answer(observation: str) -> str:
    """A code run's answer as a golden QA reply states it: the last line of its observation
    (the program's last printed line), "" when it shows nothing."""
    return (observation.strip().splitlines() or [""])[-1]


_KEY_VALUES = re.compile(r"'([^']+)'")
"""A lookup question's quoted key values ('WIIHWKB1Z3', 'Tal 7'): what singles out its record."""


def lookup_query(question: str) -> str:
    """A golden lookup's search query: the question's key values alone, which retrieve the record
    more often than the whole question (48% vs 35% top-1 with MiniLM on the demo's lookups)."""
    return " ".join(_KEY_VALUES.findall(question)) or question


def lookup_shown(observation: str, question: str, answer: str) -> bool:
    """Whether a search `observation` shows a lookup's `answer` in the record the question singles
    out (its key values), not in one that happens to share the answer: what a golden lookup needs."""
    seen = observation.lower()
    return answer.lower() in seen and all(k.lower() in seen for k in _KEY_VALUES.findall(question))


def _qa_item(instance: Instance) -> Any:
    from toolorchestra.episodes.pool import QAItem

    return QAItem.model_validate(instance.task)
