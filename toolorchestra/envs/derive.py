"""Derive declarative tool specs from an inferred schema, for a database never seen before.

Per table: `get_<entity>_details`; `find_<entity>_by_<field>` for (nearly) unique fields such as
an email; `search_<table>_by_<field>` for name/title-like text; `list_<table>_by_<field>` for each
foreign key (values that are ids of another table); `update_<entity>_<field>` for enumerations,
booleans, contact fields and numbers (the value is validated against the field's type and
enumeration; fields inside keyed maps take the map key as an extra argument);
`set_<entity>_<status>_<value>` for terminal values of a status enumeration (cancelled, blocked,
...) allowed only from the other values; `create_<entity>` for tables whose records belong to a
parent record and are narrow enough to create in one call (new id in the table's id style);
`delete_<entity>` for such child tables without a status. Every domain also gets
`transfer_to_human_agents`.
"""

from __future__ import annotations

import re
from typing import Any

from toolorchestra.envs.schema import DomainSchema, FieldInfo, TableSchema, path_str, singular
from toolorchestra.envs.toolspec import (
    CreateSpec,
    DeleteSpec,
    FindSpec,
    GetSpec,
    ListByRefSpec,
    ParentLink,
    SetStatusSpec,
    ToolSpec,
    TransferSpec,
    UpdateSpec,
)

_TERMINAL = re.compile(
    r"cancel|close|revok|suspend|block|inactiv|archiv|expir|void|refund|reject|deactiv|terminat|"
    r"frozen|freez|discontinu|withdrawn|lost|stolen|on-hold|hold",
    re.I,
)
_NAMEY = ("name", "title", "first_name", "last_name", "display_name", "brand_name", "generic_name",
          "given", "family", "label", "full_name")
_DATEY = re.compile(r"^\d{2,4}[-/]\d{2}([-/]\d{2})?([T -]\d{2}[:\-]\d{2}.*)?$")


def _ident(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    return re.sub(r"_+", "_", out) or "x"


def _field_name(info: FieldInfo) -> str:
    return _ident("_".join(s for s in info.segments if s not in ("[]", "*")))


class _Names:
    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, *parts: str) -> str:
        base = _ident("_".join(parts))[:60]
        name, n = base, 2
        while name in self.used:
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        return name


def _params(props: dict[str, dict[str, Any]], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


def _id_param(ts: TableSchema) -> str:
    return ts.layout.id_field or f"{ts.entity}_id"


def _id_schema(ts: TableSchema, what: str | None = None) -> dict[str, Any]:
    example = next(iter(ts.fields[ts.layout.id_field].examples), None) if ts.layout.id_field in ts.fields else None
    desc = f"Id of the {what or ts.entity}" + (f", e.g. {example!r}" if example is not None else "") + "."
    return {"type": ts.layout.id_type, "description": desc}


def _is_datey(info: FieldInfo) -> bool:
    return any(isinstance(v, str) and _DATEY.match(v) for v in info.examples[:3])


def _scalar(info: FieldInfo) -> bool:
    return bool(info.types) and not ({"object", "array"} & set(info.types))


def _map_params(ts: TableSchema, info: FieldInfo, taken: set[str]) -> tuple[list[str], dict[str, Any]] | None:
    """A write path with `{param}` for each keyed-map segment, and those parameters' schemas."""
    path: list[str] = []
    props: dict[str, Any] = {}
    for i, seg in enumerate(info.segments):
        if seg == "[]":
            return None
        if seg == "*":
            kmap = ts.maps.get(path_str(info.segments[:i]))
            owner = singular(info.segments[i - 1]) if i else "entry"
            param = (kmap.id_field if kmap and kmap.id_field else f"{owner}_key")
            while param in taken or param in props:
                param = f"{owner}_{param}"
            props[param] = {"type": "string", "description": f"Key of the {owner} inside the {ts.entity}."}
            path.append("{" + param + "}")
        else:
            path.append(seg)
    return path, props


def _parent(schema: DomainSchema, ts: TableSchema) -> ParentLink | None:
    """The table a record of `ts` belongs to: via its own top-level foreign key, or a list of its
    ids kept by another table (`users.tasks[]`)."""
    back_lists = {
        name: other_f.segments[0]
        for name, other in schema.tables.items()
        for other_f in other.fields.values()
        if len(other_f.segments) == 2 and other_f.segments[1] == "[]"
        and any(r.table == ts.name and r.map_path is None for r in other_f.references)
    }
    for info in sorted(ts.fields.values(), key=lambda f: len(f.segments)):
        if info.repeated or info.records != ts.n_records:
            continue
        ref = next((r for r in info.references if r.map_path is None and r.table != ts.name), None)
        if ref is not None:
            lst = back_lists.get(ref.table)
            return ParentLink(table=ref.table, param=_ident(info.leaf), ref_path=list(info.segments),
                              list_path=[lst] if lst else None)
    for name, lst in back_lists.items():
        if name != ts.name:
            parent = schema.tables[name]
            return ParentLink(table=name, param=_id_param(parent), list_path=[lst])
    return None


def _create(schema: DomainSchema, ts: TableSchema, names: _Names, max_fields: int) -> CreateSpec | None:
    parent = _parent(schema, ts)
    if parent is None or ts.n_records == 0:
        return None
    fields: dict[str, list[str]] = {}
    props: dict[str, Any] = {parent.param: _id_schema(schema.tables[parent.table])}
    required = [parent.param]
    defaults: dict[str, Any] = {}
    for info in ts.fields.values():
        top = info.segments[0]
        if info.repeated or top == ts.layout.id_field or not _scalar(info):
            continue
        if parent.ref_path and list(info.segments) == parent.ref_path:
            continue
        if info.records < 0.5 * ts.n_records:
            continue
        param = _ident("_".join(info.segments))
        if param in props:
            continue
        fields[param] = list(info.segments)
        props[param] = {**info.json_schema(), "description": f"Value of {info.path}."}
        statusish = any(w in info.leaf.lower() for w in ("status", "state"))
        if len(info.segments) == 1 and (info.enum or (statusish and info.types == ["string"])):
            defaults[top] = info.mode
            props[param]["description"] += f" Default: {info.mode!r}."
        elif info.records == ts.n_records and not info.nullable and info.types != ["boolean"] and not info.enum:
            required.append(param)
    if len(fields) > max_fields:
        return None  # too wide to create in one call: leave creation to hand-written specs
    for info in ts.fields.values():
        top = info.segments[0]
        if len(info.segments) == 2 and info.segments[1] in ("[]", "*") and info.records >= 0.9 * ts.n_records:
            defaults.setdefault(top, [] if info.segments[1] == "[]" else {})
    return CreateSpec(
        name=names("create", ts.entity),
        description=(
            f"Create a new {ts.entity} for a {singular(parent.table)} and return it with its new id"
            f" ({ts.id_style.describe() if ts.id_style else 'generated'})."
        ),
        parameters=_params(props, required),
        table=ts.name,
        fields=fields,
        defaults=defaults,
        parent=parent,
        id_field=ts.layout.id_field,
    )


def _update_rank(info: FieldInfo) -> int | None:
    if not _scalar(info) or "[]" in info.segments or _is_datey(info):
        return None
    if info.references and not info.enum:  # a reference may change only within a known small set
        return None
    leaf = info.leaf.lower()
    if info.enum:
        return 0
    if info.types == ["boolean"]:
        return 1
    if any(w in leaf for w in ("email", "phone")):
        return 2
    if set(info.types) <= {"integer", "number"}:
        return 3
    if info.searchable and "*" not in info.segments:
        return 4
    return None


def derive_table(schema: DomainSchema, ts: TableSchema, names: _Names, *, max_finds: int = 2,
                 max_searches: int = 2, max_lists: int = 6, max_updates: int = 8,
                 max_create_fields: int = 16) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    idp = _id_param(ts)
    id_props = {idp: _id_schema(ts)}
    top_fields = sorted({f.segments[0] for f in ts.fields.values()})
    specs.append(GetSpec(
        name=names("get", ts.entity, "details"),
        description=f"Get the full record of a {ts.entity} by its id. Fields: {', '.join(top_fields[:15])}.",
        parameters=_params(id_props), table=ts.name, id_param=idp,
    ))

    def hint(info: FieldInfo, words: tuple[str, ...]) -> int:
        leaf = info.leaf.lower()
        return next((i for i, w in enumerate(words) if w in leaf), len(words))

    uniques = [f for f in ts.fields.values()
               if f.unique and "string" in f.types and not f.repeated and not _is_datey(f)
               and all(len(str(v)) <= 60 for v in f.examples)]
    uniques.sort(key=lambda f: (hint(f, ("email", "phone", "number", "code", "name", "title")), f.path))
    for info in uniques[:max_finds]:
        param = info.leaf if info.leaf != idp else f"{info.leaf}_value"
        specs.append(FindSpec(
            name=names("find", ts.entity, "by", _field_name(info)),
            description=f"Find {ts.name} whose {info.path} equals the given value (case-insensitive). "
            f"Returns a list of {ts.entity} ids.",
            parameters=_params({param: {"type": "string", "description": f"The {info.path} to look for."}}),
            table=ts.name, path=list(info.segments), param=param, match="exact",
        ))
    chosen = {f.path for f in uniques[:max_finds]}
    texts = [f for f in ts.fields.values() if f.searchable and f.path not in chosen and f.leaf.lower() in _NAMEY]
    texts.sort(key=lambda f: (hint(f, _NAMEY), f.path))
    for info in texts[:max_searches]:
        specs.append(FindSpec(
            name=names("search", ts.name, "by", _field_name(info)),
            description=f"Search {ts.name} whose {info.path} contains the given text (case-insensitive). "
            f"Returns up to 20 {ts.entity} ids.",
            parameters=_params({"query": {"type": "string", "minLength": 1, "description": f"Text to find in {info.path}."}}),
            table=ts.name, path=list(info.segments), param="query", match="contains",
        ))
    refs = [f for f in ts.fields.values() if f.references]
    for info in refs[:max_lists]:
        ref = info.references[0]
        target = singular(ref.map_path.split(".")[-1]) if ref.map_path else singular(ref.table)
        target_ts = schema.tables[ref.table]
        param = f"{_ident(target)}_id"
        specs.append(ListByRefSpec(
            name=names("list", ts.name, "by", _field_name(info)),
            description=f"List the ids of {ts.name} whose {info.path} is the given {target} id.",
            parameters=_params({param: {"type": target_ts.layout.id_type if not ref.map_path else "string",
                                        "description": f"Id of the {target}."}}),
            table=ts.name, path=list(info.segments), param=param,
        ))
    ranked = sorted(
        ((r, f.path, f) for f in ts.fields.values() if f.path != ts.layout.id_field
         and (r := _update_rank(f)) is not None and f.records >= 0.5 * ts.n_records),
        key=lambda x: (x[0], x[1]),
    )
    for _, _, info in ranked[:max_updates]:
        mapped = _map_params(ts, info, {idp})
        if mapped is None:
            continue
        path, map_props = mapped
        kmap_fields = {m.id_field for m in ts.maps.values() if m.id_field}
        if info.leaf in kmap_fields and "*" in info.segments:
            continue
        value_param = info.leaf if info.leaf not in (idp, *map_props) else f"new_{info.leaf}"
        props = {**id_props, **map_props,
                 value_param: {**info.json_schema(), "description": f"New value of {info.path}."}}
        specs.append(UpdateSpec(
            name=names("update", ts.entity, _field_name(info)),
            description=f"Set {info.path} of a {ts.entity}"
            + (f" to one of {info.enum}" if info.enum else "") + ". Returns the updated record.",
            parameters=_params(props), table=ts.name, id_param=idp, path=path, value_param=value_param,
        ))
    statuses = [f for f in ts.fields.values() if f.enum and ("status" in f.leaf.lower() or "state" in f.leaf.lower())]
    for info in statuses:
        mapped = _map_params(ts, info, {idp})
        if mapped is None:
            continue
        path, map_props = mapped
        terminal = [v for v in info.enum or [] if _TERMINAL.search(str(v))]
        others = [v for v in info.enum or [] if v not in terminal]
        for value in terminal:
            specs.append(SetStatusSpec(
                name=names("set", ts.entity, _field_name(info), str(value)),
                description=f"Set {info.path} of a {ts.entity} to {value!r}"
                + (f"; allowed only when it is one of {others}." if others else "."),
                parameters=_params({**id_props, **map_props}), table=ts.name, id_param=idp, path=path,
                value=value, allowed_from=others or None,
            ))
    create = _create(schema, ts, names, max_create_fields)
    if create is not None:
        specs.append(create)
    top_status = any(len(f.segments) == 1 for f in statuses)
    if create is not None and not top_status:
        unlink = [
            (name, [f.segments[0]])
            for name, other in schema.tables.items()
            for f in other.fields.values()
            if len(f.segments) == 2 and f.segments[1] == "[]"
            and any(r.table == ts.name and r.map_path is None for r in f.references)
        ]
        specs.append(DeleteSpec(
            name=names("delete", ts.entity),
            description=f"Delete a {ts.entity} (and remove its id from the lists that reference it).",
            parameters=_params(id_props), table=ts.name, id_param=idp, unlink=unlink,
        ))
    return specs


def derive_tools(schema: DomainSchema, *, transfer: bool = True, **options: Any) -> list[ToolSpec]:
    names = _Names()
    specs: list[ToolSpec] = []
    for ts in schema.tables.values():
        specs.extend(derive_table(schema, ts, names, **options))
    if transfer:
        specs.append(TransferSpec(
            name=names("transfer_to_human_agents"),
            description="Transfer the user to a human agent, with a summary of the issue. Use only "
            "when the request cannot be handled with the other tools or the policy requires it.",
            parameters=_params({"summary": {"type": "string", "description": "Summary of the issue."}}),
        ))
    return specs
