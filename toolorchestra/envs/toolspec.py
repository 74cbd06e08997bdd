"""Declarative tool specs: a JSON schema for the arguments plus one operation over the database.

Tools are data, never code: a spec names its `kind` (get, find, list_by_ref, update, create,
delete, set_status, transfer), the table and field paths it touches, and the JSON schema of its
arguments. One generic engine (`engine.py`) runs every spec, so a tool an LLM wrote cannot execute
anything. Specs come from `derive.py` (inferred from a schema), from a hand-written `tools.json`,
or from an LLM (`synthesis/llm_synthesis.py`); all load and run the same way.

Paths are lists of segments; a segment `{param}` is replaced by that argument (a key of a keyed
map), `[]` stands for every item of a list and `*` for every entry of a keyed map (read paths only).

`tools.json` is a JSON list of specs: `save_tools(path, specs)`, `load_tools(path)`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json
from toolorchestra.envs.idstyle import IdStyle

_NAME = r"^[A-Za-z0-9_-]{1,64}$"
_PARAM = re.compile(r"^\{([A-Za-z0-9_]+)\}$")


def param_of(segment: str) -> str | None:
    """`"{account_id}"` -> `"account_id"`; a literal segment -> None."""
    m = _PARAM.match(segment)
    return m.group(1) if m else None


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=_NAME)
    description: str = Field(min_length=1)
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON schema of the arguments object."""

    def openai(self) -> dict[str, Any]:
        """The OpenAI / Hermes function-tool schema shown to a model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def param_names(self) -> set[str]:
        return set(self.parameters.get("properties", {}))

    def referenced_params(self) -> set[str]:
        """Argument names the operation reads (each must be declared in `parameters`)."""
        return set()

    @model_validator(mode="after")
    def _check_parameters(self) -> _Spec:
        if self.parameters.get("type") != "object":
            raise ValueError("parameters must be a JSON schema with type 'object'")
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"parameters is not a valid JSON schema: {exc.message}") from None
        missing = self.referenced_params() - self.param_names()
        if missing:
            raise ValueError(f"the operation uses arguments not declared in parameters: {sorted(missing)}")
        return self


class _TableSpec(_Spec):
    table: str


class GetSpec(_TableSpec):
    """Return one record by id."""

    kind: Literal["get"] = "get"
    id_param: str

    def referenced_params(self) -> set[str]:
        return {self.id_param}


class FindSpec(_TableSpec):
    """Ids of records whose field at `path` equals (`exact`, case-insensitive) or contains the argument."""

    kind: Literal["find"] = "find"
    path: list[str]
    param: str
    match: Literal["exact", "contains"] = "exact"
    limit: int = Field(20, ge=1, le=1000)

    def referenced_params(self) -> set[str]:
        return {self.param}


class ListByRefSpec(_TableSpec):
    """Ids of records whose field at `path` (possibly inside lists) holds the given id."""

    kind: Literal["list_by_ref"] = "list_by_ref"
    path: list[str]
    param: str

    def referenced_params(self) -> set[str]:
        return {self.param}


class UpdateSpec(_TableSpec):
    """Set the field at `path` of a record to the argument `value_param` (validated by the schema)."""

    kind: Literal["update"] = "update"
    id_param: str
    path: list[str]
    value_param: str

    def referenced_params(self) -> set[str]:
        return {self.id_param, self.value_param} | {p for s in self.path if (p := param_of(s))}


class SetStatusSpec(_TableSpec):
    """Set the field at `path` to the fixed `value`, only from the states in `allowed_from`."""

    kind: Literal["set_status"] = "set_status"
    id_param: str
    path: list[str]
    value: Any
    allowed_from: list[Any] | None = None

    def referenced_params(self) -> set[str]:
        return {self.id_param} | {p for s in self.path if (p := param_of(s))}


class ParentLink(BaseModel):
    """The record a new record belongs to: its id must exist in `table`; the new id is appended to
    the list at `list_path` of that parent (when set); the new record's field at `ref_path`
    (e.g. `["client_id"]` or `["buyer", "customer_no"]`) holds the parent's id."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    table: str
    param: str
    list_path: list[str] | None = None
    ref_path: list[str] | None = None


class CreateSpec(_TableSpec):
    """Insert a record built from arguments (`fields`: argument -> path) and constant `defaults`."""

    kind: Literal["create"] = "create"
    fields: dict[str, list[str]]
    defaults: dict[str, Any] = Field(default_factory=dict)
    """Top-level field -> value used when no argument set it (e.g. `status: pending`, `cards: {}`)."""
    parent: ParentLink | None = None
    id_field: str | None = None
    """Top-level field that receives the new id (besides the map key)."""
    id_style: IdStyle | None = None
    """How to mint the new id; inferred from the table's ids when absent."""

    def referenced_params(self) -> set[str]:
        return set(self.fields) | ({self.parent.param} if self.parent else set())


class DeleteSpec(_TableSpec):
    """Remove a record, and its id from lists elsewhere that reference it (`unlink`: table, path)."""

    kind: Literal["delete"] = "delete"
    id_param: str
    unlink: list[tuple[str, list[str]]] = Field(default_factory=list)

    def referenced_params(self) -> set[str]:
        return {self.id_param}


class TransferSpec(_Spec):
    """Hand the conversation to a human agent; changes nothing."""

    kind: Literal["transfer"] = "transfer"
    message: str = "Transfer successful"


ToolSpec = Annotated[
    GetSpec | FindSpec | ListByRefSpec | UpdateSpec | SetStatusSpec | CreateSpec | DeleteSpec | TransferSpec,
    Field(discriminator="kind"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ToolSpec)
KINDS = ("get", "find", "list_by_ref", "update", "set_status", "create", "delete", "transfer")


def parse_spec(data: Any, *, source: str | Path = "<tool>", index: int | None = None) -> ToolSpec:
    where = f"$[{index}]" if index is not None else "$"
    if not isinstance(data, dict):
        raise ConfigError(source, f"a tool spec must be an object, got {type(data).__name__}", where)
    if data.get("kind") not in KINDS:
        raise ConfigError(source, f"unknown kind {data.get('kind')!r}; use one of {list(KINDS)}", f"{where}.kind")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"][1:])
        name = data.get("name", "?")
        raise ConfigError(source, f"tool {name!r}: {err['msg']}", where + loc) from None


def parse_specs(data: Any, *, source: str | Path = "<tools>") -> list[ToolSpec]:
    if not isinstance(data, list):
        raise ConfigError(source, f"expected a JSON list of tool specs, got {type(data).__name__}", "$")
    specs = [parse_spec(item, source=source, index=i) for i, item in enumerate(data)]
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        if spec.name in seen:
            raise ConfigError(source, f"duplicate tool name {spec.name!r}; names must be unique", f"$[{i}].name")
        seen.add(spec.name)
    return specs


def load_tools(path: str | Path) -> list[ToolSpec]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    return parse_specs(data, source=path)


def dump_specs(specs: list[ToolSpec]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json") for s in specs]


def save_tools(path: str | Path, specs: list[ToolSpec]) -> Path:
    return atomic_write_json(path, dump_specs(specs))

