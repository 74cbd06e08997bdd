"""The one generic engine that runs declarative tool specs over a database state.

`Engine(specs, layouts)` checks every spec against the database layout (tables exist, paths are
writable, parameters declared) and compiles each argument schema once. `engine.call(state, name,
args)` validates the arguments with jsonschema and executes the operation; any problem the caller
caused (unknown tool, bad argument, missing record, a forbidden status change) raises
`ToolCallError` with a message a model can act on. `engine.replay(state, actions)` runs golden
actions in order and raises `ReplayError` naming the failing action.

Usage:
    engine = Engine(domain.tool_specs(), domain.layouts)
    state = engine.fresh_state(domain.db)       # or DbState(shared_base) for many episodes
    engine.call(state, "get_client_details", {"client_id": "03DZE1C1"})
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.envs.idstyle import next_id
from toolorchestra.envs.schema import TableLayout
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.envs.toolspec import (
    CreateSpec,
    DeleteSpec,
    FindSpec,
    GetSpec,
    ListByRefSpec,
    SetStatusSpec,
    ToolSpec,
    TransferSpec,
    UpdateSpec,
    param_of,
)


class ToolCallError(OrchestraError):
    """A tool call the engine refused: the message is shown to the agent as an observation."""

    def __init__(self, tool: str, reason: str) -> None:
        self.tool = tool
        self.reason = reason
        super().__init__(f"{tool}: {reason}")


class ReplayError(OrchestraError):
    def __init__(self, index: int, name: str, reason: str) -> None:
        self.index = index
        self.name = name
        super().__init__(f"golden action {index} ({name}) failed: {reason}")


def _arg_error(spec_name: str, error: Any) -> str:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"argument {where.lstrip('.') or '(arguments)'}: {error.message}"


class Engine:
    def __init__(self, specs: Iterable[ToolSpec], layouts: dict[str, TableLayout]) -> None:
        self.specs: dict[str, ToolSpec] = {}
        self.layouts = layouts
        for spec in specs:
            if spec.name in self.specs:
                raise ConfigError(None, f"duplicate tool name {spec.name!r}", f"tools.{spec.name}")
            self._check(spec)
            self.specs[spec.name] = spec
        self._validators = {n: Draft202012Validator(s.parameters) for n, s in self.specs.items()}

    # -- setup
    def _check(self, spec: ToolSpec) -> None:
        def bad(reason: str) -> ConfigError:
            return ConfigError(None, f"tool {spec.name!r}: {reason}", f"tools.{spec.name}")

        tables = [getattr(spec, "table", None)]
        if isinstance(spec, CreateSpec) and spec.parent:
            tables.append(spec.parent.table)
        if isinstance(spec, DeleteSpec):
            tables.extend(t for t, _ in spec.unlink)
        for table in tables:
            if table is not None and table not in self.layouts:
                raise bad(f"unknown table {table!r}; tables: {sorted(self.layouts)}")
        if isinstance(spec, (UpdateSpec, SetStatusSpec)):
            if not spec.path or any(s in ("[]", "*") for s in spec.path):
                raise bad("a write path must name one field: use '{param}' for keyed-map keys, not '*' or '[]'")
            if spec.path[0] == self.layouts[spec.table].id_field:
                raise bad("the id field cannot be updated")
        if isinstance(spec, CreateSpec):
            for param, path in spec.fields.items():
                if not path or any(s in ("[]", "*") or param_of(s) for s in path):
                    raise bad(f"field {param!r}: create paths are literal keys (got {path})")
            if spec.parent and spec.parent.ref_path and any(s in ("[]", "*") for s in spec.parent.ref_path):
                raise bad("parent.ref_path must be literal keys")
        if isinstance(spec, CreateSpec) and self.layouts[spec.table].kind == "list" and not (
            spec.id_field or self.layouts[spec.table].id_field
        ):
            raise bad("a list table needs an id field to create records")

    def fresh_state(self, db: dict[str, Any]) -> DbState:
        return DbState(BaseDb(db, self.layouts))

    # -- calls
    def call(self, state: DbState, name: str, arguments: dict[str, Any] | None) -> Any:
        spec = self.specs.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(self.specs), n=3)
            hint = f"; did you mean {close}?" if close else f"; tools: {sorted(self.specs)}"
            raise ToolCallError(name, f"unknown tool{hint}")
        args = {} if arguments is None else arguments
        if not isinstance(args, dict):
            raise ToolCallError(name, f"arguments must be a JSON object, got {type(args).__name__}")
        error = best_match(self._validators[name].iter_errors(args))
        if error is not None:
            raise ToolCallError(name, _arg_error(name, error))
        return _OPS[spec.kind](self, state, spec, args)

    def replay(self, state: DbState, actions: Iterable[Any]) -> list[Any]:
        """Run golden actions (objects or dicts with `name`, `arguments`) in order."""
        results = []
        for i, action in enumerate(actions):
            name = action["name"] if isinstance(action, dict) else action.name
            args = action.get("arguments", {}) if isinstance(action, dict) else action.arguments
            try:
                results.append(self.call(state, name, args))
            except ToolCallError as exc:
                raise ReplayError(i, name, exc.reason) from None
        return results

    # -- operations
    def _record(self, state: DbState, spec: Any, rid: Any) -> dict[str, Any]:
        rec = state.get(spec.table, rid)
        if rec is None:
            raise ToolCallError(spec.name, f"no {spec.table} record with id {rid!r}")
        return rec

    def _get(self, state: DbState, spec: GetSpec, args: dict[str, Any]) -> Any:
        return self._record(state, spec, args[spec.id_param])

    def _find(self, state: DbState, spec: FindSpec, args: dict[str, Any]) -> Any:
        value = args[spec.param]
        if spec.match == "exact":
            ids = state.find_exact(spec.table, spec.path, value)
        else:
            ids = state.find_contains(spec.table, spec.path, str(value))
        return ids[: spec.limit]

    def _list(self, state: DbState, spec: ListByRefSpec, args: dict[str, Any]) -> Any:
        return state.find_exact(spec.table, spec.path, args[spec.param])

    def _resolve(self, spec: Any, record: dict[str, Any], args: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The container holding the target field of a write path, and the field's key."""
        node: Any = record
        keys = [args[p] if (p := param_of(s)) else s for s in spec.path]
        for depth, key in enumerate(keys[:-1]):
            if not isinstance(node, dict) or key not in node:
                where = ".".join(str(k) for k in keys[: depth + 1])
                raise ToolCallError(spec.name, f"the record has no {where!r}")
            node = node[key]
        if not isinstance(node, dict):
            raise ToolCallError(spec.name, f"cannot set a field inside a {type(node).__name__}")
        return node, keys[-1]

    def _write(self, state: DbState, spec: Any, args: dict[str, Any], value: Any, check: Any = None) -> Any:
        rid = args[spec.id_param]
        self._resolve(spec, self._record(state, spec, rid), args)  # fail before copying anything
        record = state.writable(spec.table, rid)
        node, key = self._resolve(spec, record, args)
        if check is not None:
            check(node.get(key))
        node[key] = copy.deepcopy(value)
        return record

    def _update(self, state: DbState, spec: UpdateSpec, args: dict[str, Any]) -> Any:
        return self._write(state, spec, args, args[spec.value_param])

    def _set_status(self, state: DbState, spec: SetStatusSpec, args: dict[str, Any]) -> Any:
        def check(current: Any) -> None:
            if current == spec.value:
                raise ToolCallError(spec.name, f"already {spec.value!r}")
            if spec.allowed_from is not None and current not in spec.allowed_from:
                raise ToolCallError(
                    spec.name, f"cannot change from {current!r}; allowed only from {spec.allowed_from}"
                )

        return self._write(state, spec, args, spec.value, check)

    def _create(self, state: DbState, spec: CreateSpec, args: dict[str, Any]) -> Any:
        layout = self.layouts[spec.table]
        parent_id = None
        if spec.parent is not None:
            parent_id = args[spec.parent.param]
            if not state.exists(spec.parent.table, parent_id):
                raise ToolCallError(spec.name, f"no {spec.parent.table} record with id {parent_id!r}")
        style = spec.id_style or state.base.id_style(spec.table)
        existing = set(state.ids(spec.table))
        rid = next_id(style, existing, salt=spec.table, n_created=state.n_created(spec.table))
        record: dict[str, Any] = {}
        id_field = spec.id_field or layout.id_field
        if id_field:
            record[id_field] = rid
        for key, value in spec.defaults.items():
            record[key] = copy.deepcopy(value)
        assignments = [(path, args[param]) for param, path in spec.fields.items() if param in args]
        if spec.parent is not None and spec.parent.ref_path:
            assignments.append((spec.parent.ref_path, parent_id))
        for path, value in assignments:
            node = record
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = copy.deepcopy(value)
        state.insert(spec.table, rid, record)
        if spec.parent is not None and spec.parent.list_path:
            parent = state.writable(spec.parent.table, parent_id)
            node = parent
            for key in spec.parent.list_path[:-1]:
                node = node.setdefault(key, {})
            node.setdefault(spec.parent.list_path[-1], []).append(rid)
        return record

    def _delete(self, state: DbState, spec: DeleteSpec, args: dict[str, Any]) -> Any:
        rid = args[spec.id_param]
        self._record(state, spec, rid)
        state.delete(spec.table, rid)
        for table, path in spec.unlink:
            for owner in state.find_exact(table, [*path, "[]"], rid):
                node: Any = state.writable(table, owner)
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = [v for v in node[path[-1]] if v != rid]
        return {"deleted": rid}

    def _transfer(self, state: DbState, spec: TransferSpec, args: dict[str, Any]) -> Any:
        return spec.message


_OPS = {
    "get": Engine._get,
    "find": Engine._find,
    "list_by_ref": Engine._list,
    "update": Engine._update,
    "set_status": Engine._set_status,
    "create": Engine._create,
    "delete": Engine._delete,
    "transfer": Engine._transfer,
}
