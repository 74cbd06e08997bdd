"""Infer a domain database's schema: table layouts, field paths and types, enums, ids, foreign keys.

A database is `{table: records}` where records are either an object keyed by id (`"map"` tables,
tau2 style) or a list of objects with an id field (`"list"` tables). Inside a record, a nested
object whose keys are ids (e.g. a client's `accounts: {acc_id: {...}}`) is a *keyed map*; its
key segment is written `*` in field paths, and list items are written `[]`:
`accounts.*.balance.current`, `lines[].catalog_ref`, `loan_ids[]`.

Nothing here is specific to a domain: the rules are statistical (how many distinct values, how
many records, whether values are ids of another table), so a database the project has never seen
gets a schema too. Table layouts (map or list, id field) come from `layout.py`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any

from pydantic import BaseModel

from toolorchestra.envs.idstyle import IdStyle, infer_id_style
from toolorchestra.envs.layout import (  # noqa: F401 - re-exported: the schema API in one place
    ID_HINT,
    JsonType,
    TableLayout,
    a_type,
    detect_layouts,
    is_scalar_id,
    json_path,
    json_type,
    singular,
    table_records,
)

MAX_ENUM_VALUES = 15
_STATUS_WORDS = ("status", "state", "type", "kind", "category", "tier", "level", "mode", "stage")


def path_str(segments: tuple[str, ...]) -> str:
    out = ""
    for seg in segments:
        if seg == "[]":
            out += "[]"
        else:
            out += ("." if out else "") + seg
    return out


class Reference(BaseModel):
    """Values of a field are ids of `table` (or of its keyed map at `map_path`)."""

    table: str
    map_path: str | None = None
    ratio: float


class FieldInfo(BaseModel):
    path: str
    segments: tuple[str, ...]
    types: list[JsonType]
    """Non-null JSON types seen."""
    nullable: bool = False
    occurrences: int = 0
    records: int = 0
    """How many records contain the path at least once."""
    distinct: int = 0
    enum: list[Any] | None = None
    unique: bool = False
    searchable: bool = False
    examples: list[Any] = []
    mode: Any = None
    """The most common scalar value."""
    references: list[Reference] = []

    @property
    def leaf(self) -> str:
        named = [s for s in self.segments if s not in ("[]", "*")]
        return named[-1] if named else ""

    @property
    def repeated(self) -> bool:
        """Under a list or keyed map: many values per record."""
        return "[]" in self.segments or "*" in self.segments

    def json_schema(self) -> dict[str, Any]:
        """JSON schema a new value for this field must satisfy (type and enumeration)."""
        types: list[str] = [t for t in self.types if t not in ("object", "array")] or ["string"]
        if "integer" in types and "number" in types:
            types.remove("integer")
        if self.nullable:
            types.append("null")
        schema: dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
        if self.enum:
            schema["enum"] = [*self.enum, *([None] if self.nullable else [])]
        return schema


class KeyedMap(BaseModel):
    path: str
    segments: tuple[str, ...]
    id_field: str | None = None
    """Field of each entry whose value equals the entry's key, when there is one."""


class TableSchema(BaseModel):
    layout: TableLayout
    n_records: int
    fields: dict[str, FieldInfo]
    maps: dict[str, KeyedMap]
    id_style: IdStyle | None = None

    @property
    def name(self) -> str:
        return self.layout.name

    @property
    def entity(self) -> str:
        return singular(self.layout.name)


class DomainSchema(BaseModel):
    tables: dict[str, TableSchema]

    def table(self, name: str) -> TableSchema:
        try:
            return self.tables[name]
        except KeyError:
            raise KeyError(f"no table {name!r}; tables: {sorted(self.tables)}") from None


# ----------------------------------------------------------------------------------- inference


class _Collector:
    def __init__(self) -> None:
        self.scalars: dict[tuple[str, ...], list[Any]] = defaultdict(list)
        self.types: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
        self.record_hits: Counter[tuple[str, ...]] = Counter()
        self.maps: dict[tuple[str, ...], str | None] = {}
        self._seen: set[tuple[str, ...]] = set()

    def analyze(self, path: tuple[str, ...], values: list[Any], owners: list[int]) -> None:
        """`values` are every value found at `path`; `owners[i]` is the record index of values[i]."""
        for value, owner in zip(values, owners, strict=True):
            self.types[path][json_type(value)] += 1
            if (path, owner) not in self._seen:
                self._seen.add((path, owner))  # type: ignore[arg-type]
                self.record_hits[path] += 1
        dicts = [(v, o) for v, o in zip(values, owners, strict=True) if isinstance(v, dict)]
        lists = [(v, o) for v, o in zip(values, owners, strict=True) if isinstance(v, list)]
        for value, _ in zip(values, owners, strict=True):
            if not isinstance(value, (dict, list)) and value is not None:
                self.scalars[path].append(value)
        if dicts and path:
            map_id = _keyed_map(d for d, _ in dicts)
            if map_id is not False:
                self.maps[path] = map_id
                vals = [(v, o) for d, o in dicts for v in d.values()]
                self.analyze(path + ("*",), [v for v, _ in vals], [o for _, o in vals])
                dicts = []
        if dicts:
            by_key: dict[str, tuple[list[Any], list[int]]] = defaultdict(lambda: ([], []))
            for d, o in dicts:
                for k, v in d.items():
                    by_key[k][0].append(v)
                    by_key[k][1].append(o)
            for k, (vals, own) in by_key.items():
                self.analyze(path + (k,), vals, own)
        if lists:
            items = [(v, o) for lst, o in lists for v in lst]
            if items:
                self.analyze(path + ("[]",), [v for v, _ in items], [o for _, o in items])


def _keyed_map(objects: Any) -> str | None | bool:
    """False when the objects are plain nested objects; else the entries' id field (or None)."""
    objects = list(objects)
    keys: set[str] = set()
    most = 0
    entries: list[tuple[str, Any]] = []
    for obj in objects:
        keys.update(obj)
        most = max(most, len(obj))
        entries.extend(obj.items())
    if not entries or not all(isinstance(v, dict) for _, v in entries):
        return False
    for field in entries[0][1]:
        if all(v.get(field) == k for k, v in entries):
            return field
    if len(keys) >= 8 and len(keys) > 3 * most:
        return None
    return False


def _ids_of(db: dict[str, Any], layouts: dict[str, TableLayout], maps: dict[str, dict]) -> dict[Any, set]:
    targets: dict[Any, set[tuple[str, str | None]]] = defaultdict(set)
    for table, layout in layouts.items():
        records = table_records(db[table], layout)
        for rid in records:
            targets[rid].add((table, None))
        for mpath, segs in maps.get(table, {}).items():
            for rec in records.values():
                for key in _map_keys(rec, segs):
                    targets[key].add((table, mpath))
    return targets


def _map_keys(obj: Any, segs: tuple[str, ...]) -> list[str]:
    """All keys of the keyed map at `segs` (which may itself sit under lists / maps)."""
    nodes = [obj]
    for seg in segs:
        nxt: list[Any] = []
        for node in nodes:
            if seg == "[]" and isinstance(node, list):
                nxt.extend(node)
            elif seg == "*" and isinstance(node, dict):
                nxt.extend(node.values())
            elif isinstance(node, dict) and seg in node:
                nxt.append(node[seg])
        nodes = nxt
    return [k for node in nodes if isinstance(node, dict) for k in node]


def _is_enum(path: tuple[str, ...], values: list[Any], distinct: int) -> bool:
    """A small closed value set: a status-like name with repeats, or few values repeated often."""
    if not values or not all(isinstance(v, str) for v in values):
        return False
    if distinct < 2 or any(len(v) > 40 for v in values) or all(v.isdigit() for v in values):
        return False
    leaf = [s for s in path if s not in ("[]", "*")][-1].lower()
    if any(w in leaf for w in _STATUS_WORDS):
        return distinct <= MAX_ENUM_VALUES and len(values) > distinct
    return distinct <= 8 and distinct * 5 <= len(values)


def infer_table(
    table: str, content: Any, layout: TableLayout
) -> tuple[TableSchema, dict[tuple[str, ...], list[Any]]]:
    records = list(table_records(content, layout).values())
    col = _Collector()
    col.analyze((), records, list(range(len(records))))
    fields: dict[str, FieldInfo] = {}
    for segs, counter in col.types.items():
        if not segs:
            continue
        non_null = [t for t in counter if t != "null"]
        if "integer" in non_null and "number" in non_null:
            non_null.remove("integer")  # 3 and 3.5 in one field: a number
        values = col.scalars.get(segs, [])
        hashable = [v for v in values if not isinstance(v, (dict, list))]
        distinct = len(set(hashable))
        info = FieldInfo(
            path=path_str(segs),
            segments=segs,
            types=sorted(non_null),  # type: ignore[arg-type]
            nullable="null" in counter,
            occurrences=sum(counter.values()),
            records=col.record_hits[segs],
            distinct=distinct,
            examples=list(dict.fromkeys(hashable))[:5],
            mode=Counter(hashable).most_common(1)[0][0] if hashable else None,
        )
        if _is_enum(segs, hashable, distinct):
            info.enum = sorted(set(hashable))
        repeated = "[]" in segs or "*" in segs
        strings = [v for v in hashable if isinstance(v, str)]
        if not repeated and hashable and distinct >= 0.85 * len(hashable) and len(hashable) >= 0.9 * len(records):
            info.unique = segs != (layout.id_field,)
        if not repeated and strings and len(strings) == len(hashable) and info.enum is None:
            avg = sum(len(s) for s in strings) / len(strings)
            info.searchable = 2 <= avg <= 60 and distinct >= 0.3 * len(strings) and not re.fullmatch(
                r"[\d\-:T+ .]+", strings[0]
            )
        fields[info.path] = info
    maps = {path_str(s): KeyedMap(path=path_str(s), segments=s, id_field=f) for s, f in col.maps.items()}
    ids = [r[layout.id_field] for r in records] if layout.kind == "list" else list(table_records(content, layout))
    schema = TableSchema(
        layout=layout, n_records=len(records), fields=fields, maps=maps, id_style=infer_id_style(ids)
    )
    return schema, col.scalars


def infer_schema(db: dict[str, Any], layouts: dict[str, TableLayout]) -> DomainSchema:
    """Per-table schemas with foreign keys resolved against every table's ids and keyed maps."""
    tables: dict[str, TableSchema] = {}
    scalars: dict[str, dict[tuple[str, ...], list[Any]]] = {}
    for name, layout in layouts.items():
        tables[name], scalars[name] = infer_table(name, db[name], layout)
    map_segs = {t: {m.path: m.segments for m in s.maps.values()} for t, s in tables.items()}
    targets = _ids_of(db, layouts, map_segs)
    for name, schema in tables.items():
        map_id_fields = {m.segments + ("*", m.id_field) for m in schema.maps.values() if m.id_field}
        for info in schema.fields.values():
            if info.segments == (schema.layout.id_field,) or info.segments in map_id_fields:
                continue
            values = [v for v in scalars[name].get(info.segments, []) if is_scalar_id(v)]
            if not values:
                continue
            if any(isinstance(v, int) for v in values) and not ID_HINT.search(info.leaf):
                continue  # small integers collide with integer ids by chance: require a name hint
            hits: Counter[tuple[str, str | None]] = Counter()
            for v in values:
                for target in targets.get(v, ()):
                    hits[target] += 1
            refs = [
                Reference(table=t, map_path=m, ratio=round(n / len(values), 3))
                for (t, m), n in hits.items()
                if n >= 0.9 * len(values)
            ]
            info.references = sorted(refs, key=lambda r: (r.map_path is not None, r.table))
            if refs:  # a reference is listed by reference, not found or searched as text
                info.unique = info.searchable = False
        own_id = schema.fields.get(schema.layout.id_field or "")
        if own_id is not None:
            own_id.unique = own_id.searchable = False
    return DomainSchema(tables=tables)
