"""The tau2-bench Task model: load, validate and write tool-use tasks unchanged.

A task is `{id, description, user_scenario, ticket, initial_state, evaluation_criteria{actions,
env_assertions, communicate_info, nl_assertions, reward_basis}}` as in tau2-bench and the released
ToolScale data. Every model keeps fields it does not know (`extra="allow"`) and `dump_task` writes
only the fields that were present in the input (`exclude_unset`), so a third-party task survives a
load/dump round trip as equal JSON.

Usage: `tasks = load_tasks(path)`; `save_tasks(path, tasks)`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json

RewardType = Literal["DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE"]
"""tau2's reward components; this project scores DB, ACTION and COMMUNICATE."""


class _Open(BaseModel):
    """Base: unknown fields are kept so third-party tasks round-trip unchanged."""

    model_config = ConfigDict(extra="allow")


class Action(_Open):
    """A golden tool call. `compare_args`: None compares all golden arguments, [] only the name."""

    action_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: str | None = None
    compare_args: list[str] | None = None
    info: str | None = None


class EnvAssertion(_Open):
    env_type: str
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    assert_value: bool = True
    message: str | None = None


class EvaluationCriteria(_Open):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[RewardType] = Field(default_factory=lambda: ["DB", "COMMUNICATE"])


class StructuredUserInstructions(_Open):
    """tau2's structured instructions for the simulated user."""

    domain: str
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str

    def render(self) -> str:
        parts = [f"Domain: {self.domain}", f"Reason for call: {self.reason_for_call}"]
        if self.known_info:
            parts.append(f"Known info: {self.known_info}")
        if self.unknown_info:
            parts.append(f"Unknown info: {self.unknown_info}")
        parts.append(f"Task instructions: {self.task_instructions}")
        return "\n".join(parts)


class UserScenario(_Open):
    persona: str | None = None
    instructions: StructuredUserInstructions | str

    def instructions_text(self) -> str:
        if isinstance(self.instructions, str):
            return self.instructions
        return self.instructions.render()


class Description(_Open):
    purpose: str | None = None
    relevant_policies: str | None = None
    notes: str | None = None
    evolved_from: str | None = None
    """This project's field (tau2 readers ignore it): the id of the base task an evolved task's
    family starts from (`toolorchestra.synthesis.evolve`)."""


# What `evolve` wrote into the notes before `evolved_from` existed: "...; evolved from <id> (<kind>)".
_EVOLVED_NOTE = re.compile(r"evolved from (\S+) \(")


class InitialState(_Open):
    initialization_data: dict[str, Any] | None = None
    initialization_actions: list[dict[str, Any]] | None = None
    message_history: list[dict[str, Any]] | None = None


class Task(_Open):
    id: str
    description: Description | None = None
    user_scenario: UserScenario
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: EvaluationCriteria | None = None

    @property
    def actions(self) -> list[Action]:
        if self.evaluation_criteria is None or self.evaluation_criteria.actions is None:
            return []
        return self.evaluation_criteria.actions

    @property
    def communicate_info(self) -> list[str]:
        if self.evaluation_criteria is None or self.evaluation_criteria.communicate_info is None:
            return []
        return self.evaluation_criteria.communicate_info

    @property
    def family(self) -> str:
        """The id of the base task this task was evolved from (its own id when it is a base task):
        `description.evolved_from`, else the first "evolved from <id>" in the notes (data written
        before the field existed). A split keeps a family on one side."""
        if self.description is not None:
            if self.description.evolved_from:
                return self.description.evolved_from
            found = _EVOLVED_NOTE.search(self.description.notes or "")
            if found:
                return found.group(1)
        return self.id

    @property
    def reward_basis(self) -> list[str]:
        if self.evaluation_criteria is None:
            return ["DB", "COMMUNICATE"]
        return list(self.evaluation_criteria.reward_basis)


def _error_location(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
    return loc, err["msg"]


def parse_task(data: Any, *, source: str | Path = "<task>", index: int | None = None) -> Task:
    """Validate one task dict; errors name the source file, the task index and the JSON path."""
    prefix = f"$[{index}]" if index is not None else "$"
    if not isinstance(data, dict):
        raise ConfigError(source, f"a task must be a JSON object, got {type(data).__name__}", prefix)
    try:
        return Task.model_validate(data)
    except ValidationError as exc:
        loc, msg = _error_location(exc)
        raise ConfigError(source, f"invalid task: {msg}", prefix + loc) from None


def parse_tasks(data: Any, *, source: str | Path = "<tasks>") -> list[Task]:
    if not isinstance(data, list):
        raise ConfigError(source, f"expected a JSON list of tasks, got {type(data).__name__}", "$")
    return [parse_task(item, source=source, index=i) for i, item in enumerate(data)]


def load_tasks(path: str | Path) -> list[Task]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "file not found: write tasks.json first") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_tasks(data, source=path)


def dump_task(task: Task) -> dict[str, Any]:
    """The task as JSON data with exactly the fields that were set (unknown fields included)."""
    return task.model_dump(mode="json", exclude_unset=True)


def dump_tasks(tasks: list[Task]) -> list[dict[str, Any]]:
    return [dump_task(t) for t in tasks]


def save_tasks(path: str | Path, tasks: list[Task]) -> Path:
    return atomic_write_json(path, dump_tasks(tasks))
