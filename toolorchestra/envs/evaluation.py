"""Score a trajectory on a task by the paper's three criteria.

- **Execution correctness** (`DB`): the database hash after the trajectory equals the hash after
  replaying the golden actions on a fresh copy (both start from the task's initial state).
- **Process fidelity** (`COMMUNICATE`): every `communicate_info` value appears in the agent's
  messages after normalisation (case, Unicode form, whitespace, thousands separators, trailing
  decimal zeros: `750,000.00` matches `750000`); numeric values must match as whole numbers.
- **Operation completeness** (`ACTION`): the agent operated on the same entries as the golden
  actions (paper: "the same entries"). Golden actions and the agent's calls are both replayed from
  the task's initial state, and each successful call's *entries* are the records it reached (a
  `get`, `update`, `set_status`, `delete`: its record; a `find` / `list_by_ref`: the ids it
  returned; a `create`: its parent record). Then a golden
  - **write** (`update`, `set_status`, `create`, `delete`) is matched by a successful call of the
    same tool on the same record (the same record id and the same path parameters, e.g. the parcel
    key; a `create`: the same parent). The value written is not compared: the DB criterion checks
    the resulting state;
  - **read** (`get`, `find`, `list_by_ref`) is matched when the agent's successful calls, of any
    tool and with any arguments, together reached every record it returned (a read that returned
    nothing: a call of the same tool). Reaching the customer through their name instead of their
    email operates on the same entry;
  - `transfer` is matched by a call of the same tool.
  A golden action that sets `compare_args` keeps tau2-bench's rule: a call with the same name and
  equal values for those arguments (`[]`: the name only). Before this rule every golden action,
  reads included, had to be repeated with identical arguments, which is stricter than the paper.

Each criterion scores 0 or 1; the reward is the product over the task's `reward_basis`.
`ENV_ASSERTION` and `NL_ASSERTION` are not scored here (listed in `skipped`).

Usage: `evaluate(task, Trajectory(tool_calls=[...], messages=[...]), engine=engine, base=base)`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.envs.engine import Engine, ReplayError, ToolCallError
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.envs.task import Action, Task
from toolorchestra.envs.toolspec import CreateSpec, FindSpec, GetSpec, ListByRefSpec, TransferSpec, param_of

SCORED = ("DB", "ACTION", "COMMUNICATE")


class ToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Trajectory(BaseModel):
    """What an agent did: its tool calls in order and the text it said to the user."""

    tool_calls: list[ToolCall] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)
    final_hash: str | None = None
    """Hash of the live environment's final state; when absent the calls are replayed."""

    @classmethod
    def from_messages(cls, messages: list[dict[str, Any]], final_hash: str | None = None) -> Trajectory:
        """From OpenAI-style (`tool_calls[].function`) or tau2-style (`tool_calls[]`) messages."""
        calls, texts = [], []
        for msg in messages:
            if msg.get("role") != "assistant":
                continue
            if isinstance(msg.get("content"), str) and msg["content"]:
                texts.append(msg["content"])
            for call in msg.get("tool_calls") or []:
                fn = call.get("function", call)
                args = fn.get("arguments") or {}
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except json.JSONDecodeError:
                        args = {}
                calls.append(ToolCall(name=fn["name"], arguments=args if isinstance(args, dict) else {}))
        return cls(tool_calls=calls, messages=texts, final_hash=final_hash)

    @classmethod
    def golden(cls, task: Task, messages: list[str] | None = None) -> Trajectory:
        """A trajectory that performs exactly the golden actions and says every communicate value."""
        calls = [ToolCall(name=a.name, arguments=a.arguments) for a in task.actions]
        return cls(tool_calls=calls, messages=messages if messages is not None else list(task.communicate_info))


class EvalResult(BaseModel):
    db: float | None = None
    action: float | None = None
    communicate: float | None = None
    reward: float
    reward_basis: list[str]
    skipped: list[str] = Field(default_factory=list)
    expected_hash: str | None = None
    actual_hash: str | None = None
    missing_communicate: list[str] = Field(default_factory=list)
    unmatched_actions: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------------------ initial state


def _merge(target: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def prepare_state(engine: Engine, base: BaseDb, task: Task) -> DbState:
    """A fresh state with the task's `initial_state` applied (tau2: agent data, then actions)."""
    state = DbState(base)
    init = task.initial_state
    if init is None:
        return state
    data = (init.initialization_data or {}).get("agent_data") or {}
    for table, records in data.items():
        if not state.has_table(table) or not isinstance(records, dict):
            raise ReplayError(-1, "initialization_data", f"unknown table {table!r} in agent_data")
        for rid, update in records.items():
            if state.exists(table, rid):
                _merge(state.writable(table, rid), json.loads(json.dumps(update)))
            else:
                state.insert(table, rid, json.loads(json.dumps(update)))
    for i, action in enumerate(init.initialization_actions or []):
        if action.get("env_type", "assistant") != "assistant":
            raise ReplayError(i, action.get("func_name", "?"), "only assistant-side initialization actions are supported")
        try:
            engine.call(state, action["func_name"], action.get("arguments", {}))
        except ToolCallError as exc:
            raise ReplayError(i, action["func_name"], f"initialization action failed: {exc.reason}") from None
    # tau2 re-executes the assistant tool calls of a prior conversation to rebuild its state.
    history = Trajectory.from_messages(init.message_history or [])
    for i, call in enumerate(history.tool_calls):
        try:
            engine.call(state, call.name, call.arguments)
        except ToolCallError as exc:
            raise ReplayError(i, call.name, f"message_history tool call failed: {exc.reason}") from None
    return state


def golden_state(engine: Engine, base: BaseDb, task: Task) -> tuple[DbState, list[Any]]:
    """Replay the golden actions on a fresh prepared state; `ReplayError` if one raises."""
    state = prepare_state(engine, base, task)
    results = engine.replay(state, task.actions)
    return state, results


def replay_trajectory(engine: Engine, base: BaseDb, task: Task, calls: list[ToolCall]) -> DbState:
    """Run an agent's calls; refused calls change nothing, as they did for the agent."""
    state = prepare_state(engine, base, task)
    for call in calls:
        try:
            engine.call(state, call.name, call.arguments)
        except ToolCallError:
            pass
    return state


# ------------------------------------------------------------------------------- criteria

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TRAILING = re.compile(r"(\d+)\.(\d*?)0+(?!\d)")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", str(text)).casefold()
    text = _THOUSANDS.sub("", text)
    text = _TRAILING.sub(lambda m: m.group(1) + ("." + m.group(2) if m.group(2) else ""), text)
    return re.sub(r"\s+", " ", text).strip()


def communicated(info: str, said: str) -> bool:
    """Whether normalised `info` appears in normalised `said` (numbers as whole tokens)."""
    needle = normalize(info)
    if not needle:
        return True
    if _NUMBER.match(needle):
        return re.search(rf"(?<![\d.]){re.escape(needle)}(?![\d]|\.\d)", said) is not None
    return needle in said


def action_matches(golden: Action, call: ToolCall) -> bool:
    if golden.name != call.name:
        return False
    keys = golden.arguments.keys() if golden.compare_args is None else golden.compare_args
    return all(k in call.arguments and call.arguments[k] == golden.arguments.get(k) for k in keys)


def score_db(expected_hash: str, actual_hash: str) -> float:
    return 1.0 if expected_hash == actual_hash else 0.0


def score_communicate(task: Task, messages: list[str]) -> tuple[float, list[str]]:
    said = normalize(" \n ".join(messages))
    missing = [info for info in task.communicate_info if not communicated(info, said)]
    return (0.0 if missing else 1.0), missing


class Operation(BaseModel):
    """What one successful call did: `entries` are the (table, record id) it reached; `target` is
    what a write changed (table, record id, path parameters), None for a read or a transfer."""

    name: str
    write: bool
    entries: frozenset[tuple[str, str]] = frozenset()
    target: tuple[str, ...] | None = None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)  # ids may be ints or strings


def operation(engine: Engine, state: DbState, name: str, arguments: dict[str, Any]) -> Operation | None:
    """Run one call on `state`; what it operated on, or None when the engine refused it."""
    try:
        result = engine.call(state, name, arguments)
    except ToolCallError:
        return None
    spec = engine.specs[name]
    if isinstance(spec, TransferSpec):
        return Operation(name=name, write=False)
    if isinstance(spec, FindSpec | ListByRefSpec):
        return Operation(name=name, write=False, entries=frozenset((spec.table, _key(r)) for r in result))
    if isinstance(spec, GetSpec):
        return Operation(name=name, write=False, entries=frozenset({(spec.table, _key(arguments[spec.id_param]))}))
    if isinstance(spec, CreateSpec):
        if spec.parent is None:
            return Operation(name=name, write=True, target=(spec.table,))
        parent = (spec.parent.table, _key(arguments[spec.parent.param]))
        return Operation(name=name, write=True, entries=frozenset({parent}), target=parent)
    record = (spec.table, _key(arguments[spec.id_param]))  # update, set_status, delete
    params = tuple(_key(arguments[p]) for seg in getattr(spec, "path", []) if (p := param_of(seg)))
    return Operation(name=name, write=True, entries=frozenset({record}), target=(*record, *params))


def operations(engine: Engine, base: BaseDb, task: Task, calls: list[Any]) -> list[Operation | None]:
    """Each call's operation, the calls run in order from the task's prepared initial state."""
    state = prepare_state(engine, base, task)
    return [operation(engine, state, c.name, c.arguments) for c in calls]


def score_actions(task: Task, calls: list[ToolCall], *, engine: Engine, base: BaseDb) -> tuple[float, list[str]]:
    """Operation completeness (module docstring): 1.0 when every golden action is matched."""
    golden = operations(engine, base, task, task.actions)
    done = [op for op in operations(engine, base, task, calls) if op is not None]
    reached = frozenset().union(*(op.entries for op in done))
    unmatched = []
    for action, want in zip(task.actions, golden, strict=True):
        if action.compare_args is not None or want is None:  # tau2's rule (or a golden call that fails)
            ok = any(action_matches(action, c) for c in calls)
        elif want.write:
            ok = any(op.name == want.name and op.target == want.target for op in done)
        elif want.entries:
            ok = want.entries <= reached
        else:
            ok = any(op.name == want.name for op in done)
        if not ok:
            unmatched.append(action.action_id)
    return (0.0 if unmatched else 1.0), unmatched


def evaluate(
    task: Task,
    trajectory: Trajectory,
    *,
    engine: Engine,
    base: BaseDb,
    expected_hash: str | None = None,
) -> EvalResult:
    """Score `trajectory` on `task`; pass `expected_hash` to reuse a cached golden replay."""
    basis = task.reward_basis
    result = EvalResult(reward=1.0, reward_basis=basis, skipped=[b for b in basis if b not in SCORED])
    if "DB" in basis:
        if expected_hash is None:
            expected_hash = golden_state(engine, base, task)[0].hash()
        actual = trajectory.final_hash or replay_trajectory(engine, base, task, trajectory.tool_calls).hash()
        result.db = score_db(expected_hash, actual)
        result.expected_hash, result.actual_hash = expected_hash, actual
    if "COMMUNICATE" in basis:
        result.communicate, result.missing_communicate = score_communicate(task, trajectory.messages)
    if "ACTION" in basis:
        result.action, result.unmatched_actions = score_actions(task, trajectory.tool_calls, engine=engine, base=base)
    for value in (result.db, result.communicate, result.action):
        if value is not None:
            result.reward *= value
    return result
