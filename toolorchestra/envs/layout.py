"""Table layouts of a domain database and the JSON helpers used in error messages.

A table is either an object mapping ids to records (`map`, tau2 style) or a list of records that
carry their id in a field (`list`). `detect_layouts` finds each table's layout and id field and
raises `ConfigError` naming the file and JSON path of the first record that breaks the rules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from toolorchestra.core.errors import ConfigError

JsonType = Literal["string", "integer", "number", "boolean", "object", "array", "null"]

ID_HINT = re.compile(r"(^id$|_id$|id$|_ids$|_ref$|ref$|_refs$|_key$|_code$|_number$)", re.I)


def json_type(value: Any) -> JsonType:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def a_type(value: Any) -> str:
    """`an integer`, `a string`, `null`: the JSON type of a value with its article."""
    kind = json_type(value)
    return "null" if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


def json_path(*parts: str | int) -> str:
    """A readable JSON path: `$.clients["03DZE1C1"].name` (keys that are not identifiers quoted)."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part):
            out += f".{part}"
        else:
            out += f"[{part!r}]".replace("'", '"')
    return out


def singular(name: str) -> str:
    """English singular of a table name, good enough for tool names (`beneficiaries` -> `beneficiary`)."""
    if name.endswith("ies") and len(name) > 4:
        # categories -> category, but movies -> movie, cookies -> cookie
        return name[:-1] if name[-4] in "aeiouvk" else name[:-3] + "y"
    if name.endswith(("sses", "xes", "ches", "shes")):
        return name[:-2]
    if name.endswith("s") and not name.endswith(("ss", "us", "is")) and len(name) > 3:
        return name[:-1]
    return name


class TableLayout(BaseModel):
    name: str
    kind: Literal["map", "list"]
    id_field: str | None = None
    """Top-level field holding the record id (always set for list tables; optional for maps)."""
    id_type: Literal["string", "integer"] = "string"


def is_scalar_id(value: Any) -> bool:
    return (isinstance(value, str) and value != "") or (isinstance(value, int) and not isinstance(value, bool))


def _id_candidates(records: list[dict[str, Any]], table: str) -> list[str]:
    """Top-level fields present in every record with unique scalar values, best first."""
    if not records:
        return []
    common = set(records[0])
    for rec in records[1:]:
        common &= set(rec)
    out = []
    for key in common:
        values = [rec[key] for rec in records]
        if all(is_scalar_id(v) for v in values) and len(set(values)) == len(values):
            if len({type(v) for v in values}) == 1:
                out.append(key)
    own = f"{singular(table)}_id"

    def rank(key: str) -> tuple[int, str]:
        if key in ("id", own):
            return (0, key)
        return (1 if ID_HINT.search(key) else 2, key)

    return sorted(out, key=rank)


def detect_layouts(db: dict[str, Any], *, source: str | Path = "db.json") -> dict[str, TableLayout]:
    """Layout of each table; raises `ConfigError` with the JSON path of the first bad record."""
    layouts: dict[str, TableLayout] = {}
    for table, content in db.items():
        if isinstance(content, dict):
            for key, rec in content.items():
                if not isinstance(rec, dict):
                    raise ConfigError(
                        source,
                        f"record is {a_type(rec)}, expected an object (tables map ids to records)",
                        json_path(table, key),
                    )
            records = list(content.values())
            id_field = None
            if records:
                for cand in records[0]:
                    if all(rec.get(cand) == key for key, rec in content.items()):
                        id_field = cand
                        break
            layouts[table] = TableLayout(name=table, kind="map", id_field=id_field)
        elif isinstance(content, list):
            for i, rec in enumerate(content):
                if not isinstance(rec, dict):
                    raise ConfigError(
                        source, f"record is {a_type(rec)}, expected an object", json_path(table, i)
                    )
            cands = _id_candidates(content, table)
            if content and not cands:
                raise ConfigError(
                    source,
                    "records without ids: no field is present in every record with a unique "
                    "string or integer value; add an id field (e.g. 'id') to each record",
                    json_path(table),
                )
            id_field = cands[0] if cands else None
            id_type = "integer" if content and isinstance(content[0][id_field], int) else "string"
            layouts[table] = TableLayout(name=table, kind="list", id_field=id_field, id_type=id_type)
        else:
            raise ConfigError(
                source,
                f"table is {a_type(content)}; a table must be an object (id -> record) or a "
                "list of records",
                json_path(table),
            )
    return layouts


def table_records(content: dict[str, Any] | list[Any], layout: TableLayout) -> dict[Any, dict[str, Any]]:
    """`{id: record}` for either layout."""
    if layout.kind == "map":
        return dict(content)  # type: ignore[arg-type]
    return {rec[layout.id_field]: rec for rec in content}  # type: ignore[index]
