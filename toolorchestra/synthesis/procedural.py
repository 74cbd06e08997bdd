"""Procedural ToolScale task synthesis: seeded goal-directed chains over a domain's database.

The embedded default (no LLM needed). Each task is a chain *identify the user or entity -> read ->
hop to related records -> decide -> write*: the user is found by a unique field (an email) or
knows an id; the chain follows references between tables; an optional condition makes the agent
decide from what it read; the write is an update, status change, create or delete. The chain is
executed through the engine while it is built, so the golden actions replay by construction and
`communicate_info` holds values the reads returned. Output is tau2 Task JSON with structured
`user_scenario.instructions` (reason for call, known info, unknown info, task instructions).

Difficulty: `min_hops`/`max_hops`, the chance of a condition or a second write, and `tools` (a
subset of tool names the chains may use). Seeded and deterministic: the same domain, tools, seed
and config give the same tasks.

Usage: `tasks, report = synthesize_tasks(domain, 60, seed=7)`.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import OrchestraError
from toolorchestra.envs.domain import Domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.envs.task import Action, Task
from toolorchestra.envs.toolspec import ToolSpec
from toolorchestra.synthesis.chain import Chain, ChainBuilder, clean

CLOSING = "Share only the information you were given."


class ProceduralConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_hops: int = Field(0, ge=0, le=5)
    max_hops: int = Field(2, ge=0, le=5)
    p_communicate: float = Field(0.7, ge=0, le=1)
    p_condition: float = Field(0.3, ge=0, le=1)
    p_second_write: float = Field(0.2, ge=0, le=1)
    read_only_fraction: float = Field(0.1, ge=0, le=1)
    max_actions: int = Field(12, ge=1, le=1_000)
    attempts_per_task: int = Field(20, ge=1, le=10_000)
    tools: list[str] | None = None
    """Only these tool names may appear in chains (None: all)."""


class SynthesisReport(BaseModel):
    domain: str
    requested: int
    produced: int = 0
    attempts: int = 0
    rejected: dict[str, int] = Field(default_factory=dict)
    note: str | None = None
    """Why fewer tasks than requested came out, when they did."""


def make_faker(seed: int) -> Any:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    return fake


def stable_seed(*parts: Any) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def signature(task: Task) -> str:
    """What makes two tasks the same: their golden calls and communicate values."""
    return json.dumps([[(a.name, a.arguments) for a in task.actions], sorted(task.communicate_info)],
                      sort_keys=True, default=str)


def chain_to_task(chain: Chain, *, task_id: str, domain: str, notes: str) -> Task:
    actions = [Action(action_id=f"a{i}", name=s.name, arguments=s.arguments) for i, s in enumerate(chain.steps)]
    basis = ["DB", "ACTION", "COMMUNICATE"] if chain.communicate else ["DB", "ACTION"]
    return Task(
        id=task_id,
        description={"purpose": "ToolScale task synthesized procedurally", "notes": notes},
        user_scenario={
            "instructions": {
                "domain": domain,
                "reason_for_call": clean(f"You are contacting {domain} support because you want to "
                                         + "; then ".join(chain.goals) + "."),
                "known_info": clean(" ".join(chain.known)) or None,
                "unknown_info": clean(" ".join(dict.fromkeys(chain.unknown))) or None,
                "task_instructions": clean(" ".join(chain.instructions) + " " + CLOSING),
            },
        },
        evaluation_criteria={
            "actions": actions,
            "communicate_info": list(chain.communicate),
            "reward_basis": basis,
        },
    )


class ProceduralSynthesizer:
    def __init__(self, domain: Domain, specs: list[ToolSpec] | None = None, *, seed: int = 0,
                 config: ProceduralConfig | None = None, base: BaseDb | None = None) -> None:
        self.domain = domain
        self.config = config or ProceduralConfig()
        if self.config.max_hops < self.config.min_hops:
            raise OrchestraError("procedural config: max_hops must be >= min_hops")
        self.engine = Engine(specs if specs is not None else domain.tool_specs(), domain.layouts)
        unknown = set(self.config.tools or []) - set(self.engine.specs)
        if unknown:
            raise OrchestraError(f"procedural config: unknown tools {sorted(unknown)}; known: {sorted(self.engine.specs)}")
        self.base = base or BaseDb(domain.db, domain.layouts)
        self.seed = seed
        self.fake = make_faker(seed)

    def builder(self, state: DbState, rng: random.Random) -> ChainBuilder:
        allowed = set(self.config.tools) if self.config.tools is not None else None
        return ChainBuilder(self.domain, self.engine, state, rng, self.fake, allowed=allowed)

    def build(self, attempt: int) -> Chain:
        """One chain; raises `_Reject` (or an engine error) when this attempt cannot make a task."""
        cfg = self.config
        rng = random.Random(stable_seed(self.seed, self.domain.name, attempt))
        self.fake.seed_instance(stable_seed("faker", self.seed, self.domain.name, attempt))
        b = self.builder(DbState(self.base), rng)
        chain = Chain()
        node = b.start(chain)
        if node is None:
            raise _Reject("no_readable_table")
        for _ in range(rng.randint(cfg.min_hops, cfg.max_hops)):
            node = b.hop(chain, node) or node
        if rng.random() < cfg.read_only_fraction:
            if not b.ask(chain, node):
                raise _Reject("nothing_to_ask")
            return chain
        if rng.random() < cfg.p_communicate:
            b.ask(chain, node)
        if not b.write(chain, node, condition=rng.random() < cfg.p_condition):
            if not any(b.write(chain, other) for other in chain.nodes[::-1] if other is not node):
                raise _Reject("no_applicable_write")
        if rng.random() < cfg.p_second_write:
            others = [n for n in chain.nodes if b.state.exists(n.table, n.rid)]
            if others:
                b.write(chain, rng.choice(others))
        return chain

    def generate(self, n: int) -> tuple[list[Task], SynthesisReport]:
        from toolorchestra.envs.engine import ToolCallError

        report = SynthesisReport(domain=self.domain.name, requested=n)
        rejected: Counter[str] = Counter()
        tasks: list[Task] = []
        seen: set[str] = set()
        limit = n * self.config.attempts_per_task
        attempt = 0
        while len(tasks) < n and attempt < limit:
            attempt += 1
            try:
                chain = self.build(attempt)
            except _Reject as exc:
                rejected[str(exc)] += 1
                continue
            except ToolCallError as exc:
                rejected[f"engine_error:{exc.tool}"] += 1
                continue
            if len(chain.steps) > self.config.max_actions:
                rejected["too_many_actions"] += 1
                continue
            task = chain_to_task(
                chain, task_id=f"{self.domain.name}-s{self.seed}-{len(tasks):04d}", domain=self.domain.name,
                notes=f"hops={len(chain.nodes) - 1}; writes={chain.writes}; kinds={','.join(chain.kinds) or 'read'}",
            )
            sig = signature(task)
            if sig in seen:
                rejected["duplicate"] += 1
                continue
            seen.add(sig)
            tasks.append(task)
        report.produced, report.attempts, report.rejected = len(tasks), attempt, dict(rejected)
        if len(tasks) < n:
            top = ", ".join(f"{k}: {v}" for k, v in rejected.most_common(3))
            report.note = (f"only {len(tasks)} distinct tasks after {attempt} attempts; the database cannot "
                           f"support more with these tools (rejections: {top})")
        return tasks, report


class _Reject(Exception):
    pass


def synthesize_tasks(domain: Domain, n: int, *, seed: int = 0, config: ProceduralConfig | None = None,
                     specs: list[ToolSpec] | None = None) -> tuple[list[Task], SynthesisReport]:
    return ProceduralSynthesizer(domain, specs, seed=seed, config=config).generate(n)
