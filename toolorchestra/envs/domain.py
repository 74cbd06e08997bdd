"""Load a domain folder: `db.json` (required), `policy.md` and `tools.json` (optional).

Checks that the database is a JSON object of tables, each an object (id -> record) or a list of
records with an id field, within size and depth limits; every problem raises `ConfigError` naming
the file and the JSON path. The schema (see `schema.py`) is inferred lazily and cached.

Usage: `domain = load_domain("data/toolscale/bank")`; `domain.schema`; `domain.tool_specs()`
(the folder's `tools.json`, or tools derived from the schema when there is none).
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.derive import derive_tools
from toolorchestra.envs.schema import DomainSchema, TableLayout, detect_layouts, infer_schema, json_path

if TYPE_CHECKING:
    from toolorchestra.envs.toolspec import ToolSpec


class Limits(BaseModel):
    """Bounds that reject absurd inputs before they exhaust memory or recursion."""

    max_bytes: int = Field(512 * 1024 * 1024, gt=0)
    max_depth: int = Field(48, gt=1)
    max_records_per_table: int = Field(2_000_000, gt=0)
    max_tables: int = Field(1_000, gt=0)


def check_depth(db: Any, *, source: str | Path, max_depth: int) -> None:
    """Iterative walk (no recursion limit) that names the first path nested deeper than allowed."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(db, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > max_depth:
            raise ConfigError(
                source, f"nesting deeper than {max_depth} levels; flatten the data or raise the limit",
                json_path(*path[: max_depth + 1]),
            )
        if isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in node.items() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node) if isinstance(v, (dict, list)))


def validate_db(db: Any, *, source: str | Path = "db.json", limits: Limits | None = None) -> dict[str, TableLayout]:
    """Check structure and limits of a parsed database; return each table's layout."""
    limits = limits or Limits()
    if not isinstance(db, dict):
        raise ConfigError(source, f"the database must be a JSON object of tables, got a {type(db).__name__}", "$")
    if not db:
        raise ConfigError(source, "the database has no tables", "$")
    if len(db) > limits.max_tables:
        raise ConfigError(source, f"{len(db)} tables exceed the limit of {limits.max_tables}", "$")
    for table, content in db.items():
        if isinstance(content, (dict, list)) and len(content) > limits.max_records_per_table:
            raise ConfigError(
                source, f"{len(content)} records exceed the limit of {limits.max_records_per_table}",
                json_path(table),
            )
    check_depth(db, source=source, max_depth=limits.max_depth)
    return detect_layouts(db, source=source)


def read_json(path: Path, *, max_bytes: int) -> Any:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ConfigError(path, "file not found") from None
    if size > max_bytes:
        raise ConfigError(path, f"{size} bytes exceed the limit of {max_bytes}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(path, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise ConfigError(path, "nesting too deep to parse; flatten the data") from None


class Domain:
    """A domain: its database (read-only base state), policy text and optional tool specs."""

    def __init__(
        self,
        name: str,
        db: dict[str, Any],
        *,
        policy: str | None = None,
        tools: list[ToolSpec] | None = None,
        root: Path | None = None,
        layouts: dict[str, TableLayout] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.db = db
        self.policy = policy
        self.tools = tools
        self.root = root
        source = (root / "db.json") if root else f"<{name} db>"
        self.layouts = layouts if layouts is not None else validate_db(db, source=source, limits=limits)

    @cached_property
    def schema(self) -> DomainSchema:
        return infer_schema(self.db, self.layouts)

    def tool_specs(self) -> list[ToolSpec]:
        """The domain's own specs (`tools.json`), else specs derived from the schema."""
        if self.tools is not None:
            return self.tools
        return derive_tools(self.schema)

    def __repr__(self) -> str:
        return f"Domain({self.name!r}, tables={list(self.layouts)})"


def load_domain(path: str | Path, *, limits: Limits | None = None, name: str | None = None) -> Domain:
    """Load and check a domain folder; `ConfigError` names the file and JSON path of a problem."""
    from toolorchestra.envs.toolspec import load_tools

    root = Path(path)
    if not root.is_dir():
        raise ConfigError(root, "not a folder: a domain is a folder with db.json (and optional policy.md, tools.json)")
    limits = limits or Limits()
    db_path = root / "db.json"
    if not db_path.exists():
        raise ConfigError(db_path, "file not found: a domain folder needs db.json")
    db = read_json(db_path, max_bytes=limits.max_bytes)
    layouts = validate_db(db, source=db_path, limits=limits)
    policy_path = root / "policy.md"
    policy = policy_path.read_text(encoding="utf-8") if policy_path.exists() else None
    tools_path = root / "tools.json"
    tools = load_tools(tools_path) if tools_path.exists() else None
    return Domain(name or root.resolve().name, db, policy=policy, tools=tools, root=root, layouts=layouts)
