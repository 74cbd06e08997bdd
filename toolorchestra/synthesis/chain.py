"""Building blocks of goal-directed task chains: pick records, hops, reads and writes.

A `ChainBuilder` works on a live `DbState` through the engine, so every golden action it emits has
really been executed and every `communicate_info` value is what a read returned. Procedural
synthesis (`procedural.py`) and the evolve step (`evolve.py`) share it. All randomness comes from
the `random.Random` and the seeded Faker passed in, so a seed fixes the output.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.records import human
from toolorchestra.envs.schema import FieldInfo, TableSchema, path_str
from toolorchestra.envs.state import DbState, values_at
from toolorchestra.envs.toolspec import (
    CreateSpec,
    DeleteSpec,
    FindSpec,
    GetSpec,
    ListByRefSpec,
    SetStatusSpec,
    UpdateSpec,
    param_of,
)

WRITE_KINDS = ("update", "set_status", "create", "delete")


def show(value: Any) -> str:
    """How a value is written in instructions and communicate_info (750000.0 -> 750000)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{value:.10g}"
    return str(value)


@dataclass
class Step:
    name: str
    arguments: dict[str, Any]
    result: Any = None


@dataclass
class Node:
    """A record the chain has reached and how the user refers to it."""

    table: str
    rid: Any
    phrase: str


@dataclass
class Chain:
    steps: list[Step] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    goals: list[str] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    communicate: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    writes: int = 0
    kinds: list[str] = field(default_factory=list)


class ChainBuilder:
    def __init__(self, domain: Domain, engine: Engine, state: DbState, rng: random.Random, fake: Any,
                 *, allowed: set[str] | None = None) -> None:
        self.domain, self.engine, self.state, self.rng, self.fake = domain, engine, state, rng, fake
        self.schema = domain.schema
        specs = [s for s in engine.specs.values() if allowed is None or s.name in allowed]
        self.gets = {s.table: s for s in specs if isinstance(s, GetSpec)}
        self.finds = [s for s in specs if isinstance(s, FindSpec)]
        self.lists = [s for s in specs if isinstance(s, ListByRefSpec)]
        self.writes = [s for s in specs if isinstance(s, (UpdateSpec, SetStatusSpec, CreateSpec, DeleteSpec))]

    # -- execution
    def run(self, chain: Chain, name: str, arguments: dict[str, Any]) -> Any:
        result = self.engine.call(self.state, name, arguments)
        chain.steps.append(Step(name, arguments, result))
        return result

    def field(self, table: str, segments: list[str] | tuple[str, ...]) -> FieldInfo | None:
        return self.schema.tables[table].fields.get(path_str(tuple(segments)))

    def ts(self, table: str) -> TableSchema:
        return self.schema.tables[table]

    # -- identification
    def start(self, chain: Chain) -> Node | None:
        tables = [t for t in self.gets if self.state.ids(t)]
        if not tables:
            return None
        weights = [3 if any(f.table == t and f.match == "exact" for f in self.finds) else 1 for t in tables]
        table = self.rng.choices(tables, weights)[0]
        rid = self.rng.choice(self.state.ids(table))
        entity = self.ts(table).entity.replace("_", " ")
        record = self.state.get(table, rid)
        finds = [f for f in self.finds if f.table == table]
        self.rng.shuffle(finds)
        for spec in finds:
            values = [v for v in values_at(record, spec.path) if isinstance(v, str) and v]
            if not values:
                continue
            value = values[0]
            query = value if spec.match == "exact" else value
            hits = self.engine.call(self.state, spec.name, {spec.param: query})
            if hits == [rid]:
                self.run(chain, spec.name, {spec.param: query})
                chain.known.append(f"The {human(spec.path)} of your {entity} is {value}.")
                chain.unknown.append(f"You do not know your {entity} id.")
                break
        else:
            chain.known.append(f"Your {entity} id is {rid}.")
        self.run(chain, self.gets[table].name, {self.gets[table].id_param: rid})
        node = Node(table, rid, f"your {entity}")
        chain.nodes.append(node)
        return node

    # -- hops
    def _distinguish(self, table: str, rid: Any, siblings: list[Any]) -> str | None:
        """A short `field is value` that singles out `rid` among `siblings`, if any."""
        if len(siblings) == 1:
            return ""
        record = self.state.get(table, rid)
        fields = [f for f in self.ts(table).fields.values()
                  if not f.repeated and not f.references and f.path != self.ts(table).layout.id_field
                  and (f.enum or f.searchable or f.unique) and set(f.types) & {"string", "integer"}]
        self.rng.shuffle(fields)
        for info in fields:
            mine = list(values_at(record, info.segments))
            if len(mine) != 1 or mine[0] is None or len(show(mine[0])) > 40:
                continue
            others = [list(values_at(self.state.get(table, s), info.segments)) for s in siblings if s != rid]
            if all(mine[0] not in o for o in others):
                return f"its {human(info.segments)} is {show(mine[0])}"
        return None

    def hop(self, chain: Chain, node: Node) -> Node | None:
        """Move to a related record: one that references `node`, or one `node` references."""
        options: list[tuple[str, Any]] = []
        for spec in self.lists:
            info = self.field(spec.table, spec.path)
            if info and any(r.table == node.table and r.map_path is None for r in info.references):
                if spec.table in self.gets:
                    options.append(("list", spec))
        record = self.state.get(node.table, node.rid)
        for info in self.ts(node.table).fields.values():
            ref = next((r for r in info.references if r.map_path is None and r.table in self.gets), None)
            if ref and "*" not in info.segments and info.segments.count("[]") <= 1:
                options.append(("ref", (info, ref.table)))
        self.rng.shuffle(options)
        for kind, option in options:
            if kind == "list":
                spec = option
                ids = self.engine.call(self.state, spec.name, {spec.param: node.rid})
                table = spec.table
            else:
                info, table = option
                ids = list(dict.fromkeys(v for v in values_at(record, info.segments) if self.state.exists(table, v)))
            if not ids:
                continue
            rid = self.rng.choice(ids)
            which = self._distinguish(table, rid, ids)
            if which is None or any(n.table == table and n.rid == rid for n in chain.nodes):
                continue  # never revisit a record: the phrase would point back at it
            entity = self.ts(table).entity.replace("_", " ")
            if kind == "list":
                self.run(chain, spec.name, {spec.param: node.rid})
                full = f"the {entity} linked to {node.phrase}"
            else:
                full = f"the {entity} given as the {human(info.segments)} of {node.phrase}"
            full += f" ({which})" if which else ""
            get = self.gets[table]
            self.run(chain, get.name, {get.id_param: rid})
            new = Node(table, rid, f"that {entity}")
            chain.nodes.append(new)
            chain.instructions.append(f"Your request concerns {full}.")
            chain.unknown.append(f"You do not know the {entity} id.")
            return new
        return None

    # -- reads
    def ask(self, chain: Chain, node: Node, exclude: set[str] = frozenset()) -> bool:
        """Ask for one short scalar of `node` (taken from the last read) as communicate_info."""
        record = self.state.get(node.table, node.rid)
        ts = self.ts(node.table)
        fields = [f for f in ts.fields.values()
                  if not f.repeated and not f.references and f.path != ts.layout.id_field and f.path not in exclude
                  and f.types and f.types != ["boolean"] and set(f.types) <= {"string", "integer", "number"}]
        self.rng.shuffle(fields)
        known = " ".join(chain.known)
        for info in fields:
            values = list(values_at(record, info.segments))
            if len(values) != 1 or values[0] in (None, ""):
                continue
            text = show(values[0])
            if len(text) > 40 or text in known or (isinstance(values[0], str) and len(text) < 2):
                continue
            chain.communicate.append(text)
            chain.goals.append(f"learn the {human(info.segments)} of {node.phrase}")
            chain.instructions.append(f"Ask the agent to tell you the {human(info.segments)} of {node.phrase}.")
            return True
        return False

    # -- writes
    def new_value(self, info: FieldInfo, current: Any) -> Any:
        if info.enum:
            choices = [v for v in info.enum if v != current]
            return self.rng.choice(choices) if choices else None
        if info.types == ["boolean"]:
            return not current if isinstance(current, bool) else self.rng.choice([True, False])
        if set(info.types) <= {"integer", "number"} and info.types:
            base = current if isinstance(current, (int, float)) and not isinstance(current, bool) else 10
            if info.types == ["integer"]:
                return int(base) + self.rng.randint(1, 9)
            value = round(base * self.rng.choice([0.5, 0.8, 1.2, 1.5]) + self.rng.randint(1, 9), 2)
            return value if value != current else value + 1
        leaf = info.leaf.lower()
        fake = self.fake
        for words, make in ((("email",), fake.email), (("phone",), fake.phone_number), (("city", "municipality"), fake.city),
                            (("street", "address", "line"), fake.street_address), (("zip", "postal"), fake.postcode),
                            (("first", "given"), fake.first_name), (("last", "family"), fake.last_name),
                            (("country", "nation"), fake.country), (("name", "title", "label"), fake.catch_phrase)):
            if any(w in leaf for w in words):
                value = make()
                break
        else:
            value = fake.sentence(nb_words=4).rstrip(".")
        return value if value != current else value + " II"

    def _path_args(self, spec: UpdateSpec | SetStatusSpec, record: dict[str, Any]) -> tuple[dict[str, Any], Any, str] | None:
        """Bind keyed-map params to a random existing entry; return args, current value, phrase."""
        args: dict[str, Any] = {}
        node: Any = record
        phrase = ""
        for seg in spec.path[:-1]:
            param = param_of(seg)
            if param is None:
                if not isinstance(node, dict) or seg not in node:
                    return None
                node = node[seg]
                continue
            if not isinstance(node, dict) or not node:
                return None
            key = self.rng.choice(sorted(node))
            args[param] = key
            node = node[key]
            phrase += f" ({param.replace('_', ' ')} {key})"
        if not isinstance(node, dict) or spec.path[-1] not in node:
            return None
        return args, node[spec.path[-1]], phrase

    def write(self, chain: Chain, node: Node, condition: bool = False, exclude: set[str] = frozenset()) -> bool:
        """One write on `node` (or a child of it for create); optionally guarded by a condition.
        Tools named in `exclude` (e.g. writes the task already makes) are not used."""
        options = [s for s in self.writes if s.name not in exclude and (
            (s.table == node.table and not isinstance(s, CreateSpec))
            or (isinstance(s, CreateSpec) and s.parent and s.parent.table == node.table))]
        self.rng.shuffle(options)
        record = self.state.get(node.table, node.rid)
        for spec in options:
            if isinstance(spec, CreateSpec):
                if self._create(chain, node, spec):
                    return True
                continue
            if isinstance(spec, DeleteSpec):
                chain.goals.append(f"delete {node.phrase}")
                chain.instructions.append(f"Ask the agent to delete {node.phrase}.")
                self.run(chain, spec.name, {spec.id_param: node.rid})
                chain.writes += 1
                chain.kinds.append("delete")
                return True
            bound = self._path_args(spec, record)
            if bound is None:
                continue
            args, current, where = bound
            info = self.field(node.table, [("*" if param_of(s) else s) for s in spec.path])
            if isinstance(spec, SetStatusSpec):
                if current == spec.value or (spec.allowed_from is not None and current not in spec.allowed_from):
                    continue
                value, name = spec.value, spec.name
                args = {spec.id_param: node.rid, **args}
            else:
                if info is None:
                    continue
                value = self.new_value(info, current)
                if value is None:
                    continue
                name = spec.name
                args = {spec.id_param: node.rid, **args, spec.value_param: value}
            what = f"the {human(spec.path)}{where} of {node.phrase}"
            written = path_str(tuple("*" if param_of(s) else s for s in spec.path))
            if condition and self._conditional(chain, node, written, what, value, name, args):
                return True
            chain.goals.append(f"change {what} to {show(value)}")
            chain.instructions.append(f"Ask the agent to change {what} to {show(value)}.")
            self.run(chain, name, args)
            chain.writes += 1
            chain.kinds.append(spec.kind)
            return True
        return False

    def _conditional(self, chain: Chain, node: Node, written: str, what: str, value: Any, name: str,
                     args: dict[str, Any]) -> bool:
        """`If <field> is X, change ...; otherwise leave it.` The branch taken follows the data."""
        record = self.state.get(node.table, node.rid)
        ts = self.ts(node.table)
        fields = [f for f in ts.fields.values()
                  if not f.repeated and (f.enum or f.types == ["boolean"]) and f.path != written]
        self.rng.shuffle(fields)
        for info in fields:
            values = list(values_at(record, info.segments))
            if len(values) != 1 or values[0] is None:
                continue
            actual = values[0]
            holds = self.rng.random() < 0.6
            options = [v for v in (info.enum or [True, False]) if v != actual]
            shown = actual if holds or not options else self.rng.choice(options)
            chain.instructions.append(
                f"If the {human(info.segments)} of {node.phrase} is {show(shown)}, ask the agent to change "
                f"{what} to {show(value)}; otherwise ask for no change."
            )
            chain.goals.append(f"check the {human(info.segments)} and decide")
            if shown == actual:
                self.run(chain, name, args)
                chain.writes += 1
                chain.kinds.append("conditional")
            else:
                chain.kinds.append("conditional-no-op")
            return True
        return False

    def _create(self, chain: Chain, node: Node, spec: CreateSpec) -> bool:
        assert spec.parent is not None
        props = spec.parameters.get("properties", {})
        required = set(spec.parameters.get("required", []))
        args: dict[str, Any] = {spec.parent.param: node.rid}
        table_ids = self.state.ids(spec.table)
        for param, path in spec.fields.items():
            if param not in required and self.rng.random() < 0.5:
                continue
            info = self.field(spec.table, path)
            enum = props.get(param, {}).get("enum")
            if enum:
                args[param] = self.rng.choice([v for v in enum if v is not None])
                continue
            donors = [v for rid in self.rng.sample(table_ids, min(5, len(table_ids)))
                      for v in values_at(self.state.get(spec.table, rid), path) if v is not None]
            if donors and self.rng.random() < 0.5:
                args[param] = donors[0]
            elif info is not None:
                args[param] = self.new_value(info, None)
            elif donors:
                args[param] = donors[0]
            else:
                return False
        entity = self.ts(spec.table).entity.replace("_", " ")
        details = ", ".join(f"{human(spec.fields[p])} {show(v)}" for p, v in args.items() if p in spec.fields)
        chain.goals.append(f"create a new {entity} for {node.phrase}")
        chain.instructions.append(f"Ask the agent to create a new {entity} for {node.phrase} with {details}.")
        self.run(chain, spec.name, args)
        chain.writes += 1
        chain.kinds.append("create")
        return True


def clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()
