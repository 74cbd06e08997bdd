"""A live domain environment whose declarative tools the agent loop can call as `Tool`s.

`DomainEnv(domain)` holds one mutable database state (copy-on-write over the domain's shared,
read-only base); `env.tools()` exposes each spec as a `toolorchestra.tools.base.Tool` whose
`run` executes through the engine and returns the JSON result as the observation. A refused
call (unknown record, bad argument, forbidden change) raises `ToolError`, which the agent loop
shows to the model as an error observation. `env.reset(task)` starts a fresh episode.
"""

from __future__ import annotations

import json
from typing import Any

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.engine import Engine, ToolCallError
from toolorchestra.envs.evaluation import EvalResult, Trajectory, evaluate, prepare_state
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.envs.task import Task
from toolorchestra.envs.toolspec import ToolSpec
from toolorchestra.tools.base import Tool, ToolError, ToolOutput


class DomainEnv:
    """One episode's environment: engine, shared base and this episode's state."""

    def __init__(self, domain: Domain, specs: list[ToolSpec] | None = None, *, base: BaseDb | None = None) -> None:
        self.domain = domain
        self.engine = Engine(specs if specs is not None else domain.tool_specs(), domain.layouts)
        self.base = base or BaseDb(domain.db, domain.layouts)
        self.state: DbState = DbState(self.base)
        self.task: Task | None = None

    def reset(self, task: Task | None = None) -> DbState:
        self.task = task
        self.state = prepare_state(self.engine, self.base, task) if task is not None else DbState(self.base)
        return self.state

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Run one tool on this episode's state; raises `ToolCallError` when refused."""
        return self.engine.call(self.state, name, arguments)

    def tools(self) -> list[Tool]:
        return [DomainTool(self, spec) for spec in self.engine.specs.values()]

    def hash(self) -> str:
        return self.state.hash()

    def score(self, trajectory: Trajectory) -> EvalResult:
        """Score the episode: the live state's hash stands in for replaying the calls."""
        if self.task is None:
            raise ValueError("reset(task) before scoring")
        live = trajectory.model_copy(update={"final_hash": self.state.hash()})
        return evaluate(self.task, live, engine=self.engine, base=self.base)


class DomainTool(Tool):
    """Adapter: one declarative spec of a live `DomainEnv` as an agent tool."""
    deterministic = True  # a call that fails raises before it writes (`envs.engine`), so its repeat fails alike

    def __init__(self, env: DomainEnv, spec: ToolSpec) -> None:
        self.env = env
        self.name = spec.name
        self.description = spec.description
        self.parameters = spec.parameters

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        try:
            result = self.env.call(self.name, arguments)
        except ToolCallError as exc:
            raise ToolError(str(exc)) from None
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        return ToolOutput(content=text, data=result)
