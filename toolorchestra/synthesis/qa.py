"""QA synthesis for the paper's QA setting: questions answerable from a domain's records.

Items have the HLE / FRAMES shape `{id, question, answer, answer_type, category}`:
- `lookup` (answer_type `exactMatch`): a field of the one record singled out by a unique value
  ("What is the status of the loan whose ... is ...?"); the answer is the stored value.
- `count` and `aggregate` (answer_type `numeric`): computed over records — how many records
  have an enumeration value, how many items a record's list holds, or the sum / average / maximum
  of a numeric field over the records that reference one entity.
- `arithmetic` (answer_type `numeric`): a calculation stated in the question ("What is 347 * 29
  + 15?", "What is the sum of 1208, 77 and 351?"), with operands too large for a small model to
  get right by recall: the category that only running code solves reliably. `program` holds the
  Python expression that computes it (the golden call of the SFT warm start).

`records_as_documents(domain)` turns every record into a `{id, title, text}` document for the
local-search tool, so lookups are answerable by retrieval and numeric ones by computation over
retrieved records. Seeded and deterministic.

Usage: `items = synthesize_qa(domain, 40, seed=7)`.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.records import flat_database, human, run_program
from toolorchestra.envs.schema import FieldInfo, TableSchema, table_records
from toolorchestra.envs.state import values_at
from toolorchestra.synthesis.chain import show
from toolorchestra.synthesis.procedural import stable_seed

ANSWER_TYPES = ("exactMatch", "numeric")
CATEGORIES = ("lookup", "count", "aggregate", "arithmetic")


def number(value: float) -> str:
    return show(round(float(value), 2))


def _flatten(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [line for k, v in node.items() for line in _flatten(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(node, list):
        return [line for i, v in enumerate(node) for line in _flatten(v, f"{prefix}[{i}]")]
    return [f"{prefix}: {show(node) if node is not None else 'null'}"]


def records_as_documents(domain: Domain) -> list[dict[str, str]]:
    """One document per record: `path: value` lines, titled by table entity and id."""
    docs = []
    for table, layout in domain.layouts.items():
        entity = domain.schema.tables[table].entity.replace("_", " ")
        for rid, rec in table_records(domain.db[table], layout).items():
            docs.append({"id": f"{domain.name}/{table}/{rid}", "title": f"{domain.name} {entity} {rid}",
                         "text": "\n".join(_flatten(rec))})
    return docs


class _QA:
    def __init__(self, domain: Domain, rng: random.Random) -> None:
        self.domain, self.rng = domain, rng
        self.records = {t: table_records(domain.db[t], lay) for t, lay in domain.layouts.items()}

    def keys(self, ts: TableSchema) -> list[FieldInfo]:
        """Fields that single out a record in questions (unique short strings)."""
        return [f for f in ts.fields.values() if f.unique and f.types == ["string"] and not f.repeated
                and all(len(str(v)) <= 50 for v in f.examples)]

    def ident(self, ts: TableSchema, rid: Any) -> str:
        return self.ident_ref(ts, rid)[0]

    def ident_ref(self, ts: TableSchema, rid: Any) -> tuple[str, str]:
        """How a question singles out the record: its words, and the program's expression for the
        record (`find(...)` by the same field and value, or by `'id'`; `envs.records`)."""
        record = self.records[ts.name][rid]
        keys = self.keys(ts)
        self.rng.shuffle(keys)
        for info in keys:
            values = list(values_at(record, info.segments))
            if len(values) == 1 and isinstance(values[0], str) and values[0]:
                hits = [r for r, rec in self.records[ts.name].items() if values[0] in values_at(rec, info.segments)]
                if hits == [rid]:
                    return (f"the {ts.entity.replace('_', ' ')} whose {human(info.segments)} is '{values[0]}'",
                            f"find({ts.name!r}, {human(info.segments)!r}, {values[0]!r})")
        return f"the {ts.entity.replace('_', ' ')} with id '{rid}'", f"find({ts.name!r}, 'id', {rid!r})"

    def lookup(self, ts: TableSchema) -> dict[str, Any] | None:
        rid = self.rng.choice(list(self.records[ts.name]))
        record = self.records[ts.name][rid]
        targets = [f for f in ts.fields.values() if not f.repeated and f.path != ts.layout.id_field
                   and f.types and set(f.types) <= {"string", "integer", "number"}]
        self.rng.shuffle(targets)
        who = self.ident(ts, rid)
        for info in targets:
            values = list(values_at(record, info.segments))
            if len(values) != 1 or values[0] in (None, "") or len(show(values[0])) > 60 or show(values[0]) in who:
                continue
            return {"question": f"In the {self.domain.name} database, what is the {human(info.segments)} of {who}?",
                    "answer": show(values[0]), "answer_type": "exactMatch", "category": "lookup"}
        return None

    def count(self, ts: TableSchema) -> dict[str, Any] | None:
        options: list[tuple[str, Any]] = [("enum", f) for f in ts.fields.values() if f.enum and not f.repeated]
        options += [("list", f) for f in ts.fields.values()
                    if len(f.segments) >= 2 and f.segments[-1] == "[]" and "[]" not in f.segments[:-1] and "*" not in f.segments]
        if not options:
            return None
        kind, info = self.rng.choice(options)
        if kind == "enum":
            value = self.rng.choice(info.enum or [])
            n = sum(1 for rec in self.records[ts.name].values() if value in values_at(rec, info.segments))
            question = (f"In the {self.domain.name} database, how many {ts.name.replace('_', ' ')} have "
                        f"{human(info.segments)} equal to '{value}'?")
            program = f"print(count({ts.name!r}, {human(info.segments)!r}, {value!r}))"
        else:
            rid = self.rng.choice(list(self.records[ts.name]))
            n = sum(1 for _ in values_at(self.records[ts.name][rid], info.segments))
            who, record = self.ident_ref(ts, rid)
            question = (f"In the {self.domain.name} database, how many entries does the "
                        f"{human(info.segments[:-1])} list of {who} have?")
            program = f"print(len({record}[{human(info.segments[:-1])!r}]))"
        return {"question": question, "answer": str(n), "answer_type": "numeric", "category": "count",
                "program": program}

    def aggregate(self, ts: TableSchema) -> dict[str, Any] | None:
        refs = [f for f in ts.fields.values() if not f.repeated and any(r.map_path is None for r in f.references)]
        # numbers a user would aggregate: not ids or references ("the total customer id" means nothing)
        nums = [f for f in ts.fields.values() if not f.repeated and f.types and set(f.types) <= {"integer", "number"}
                and not f.references and human(f.segments).split()[-1] != "id"]
        if not refs or not nums:
            return None
        ref_field = self.rng.choice(refs)
        target = next(r.table for r in ref_field.references if r.map_path is None)
        num = self.rng.choice(nums)
        groups: dict[Any, list[float]] = {}
        for rec in self.records[ts.name].values():
            owners = list(values_at(rec, ref_field.segments))
            values = [v for v in values_at(rec, num.segments) if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if len(owners) == 1 and len(values) == 1:
                groups.setdefault(owners[0], []).append(values[0])
        owners = [o for o in groups if o in self.records[target]]
        if not owners:
            return None
        owner = self.rng.choice(owners)
        op = self.rng.choice(["total", "average", "maximum"])
        vals = groups[owner]
        answer = {"total": sum(vals), "average": sum(vals) / len(vals), "maximum": max(vals)}[op]
        who, record = self.ident_ref(self.domain.schema.tables[target], owner)
        question = (f"In the {self.domain.name} database, what is the {op} {human(num.segments)} over all "
                    f"{ts.name.replace('_', ' ')} whose {human(ref_field.segments)} refers to {who}? "
                    "Round to 2 decimals.")
        by_id = f"find({target!r}, 'id', {owner!r})"
        owner_ref = repr(owner) if record == by_id else record
        program = f"print({op}({human(num.segments)!r}, {ts.name!r}, {human(ref_field.segments)!r}, {owner_ref}))"
        return {"question": question, "answer": number(answer), "answer_type": "numeric", "category": "aggregate",
                "program": program}


def arithmetic(rng: random.Random) -> dict[str, Any]:
    """One calculation in symbols or words, with the Python program that prints its answer."""
    form = rng.choice(("symbols", "words", "sum", "product", "percent"))
    if form == "sum":
        terms = [rng.randint(100, 9999) for _ in range(rng.randint(3, 4))]
        expression, value = " + ".join(map(str, terms)), float(sum(terms))
        question = f"What is the sum of {', '.join(map(str, terms[:-1]))} and {terms[-1]}?"
    elif form == "product":
        a, b = rng.randint(12, 999), rng.randint(12, 99)
        expression, value = f"{a} * {b}", float(a * b)
        # half in bare symbols: `orchestra ask "What is 17 * 23?"` is how users ask, and the
        # warm start had never seen it (no extra draw: the other items stay as they were)
        question = f"What is {a} * {b}?" if a % 2 else f"What is the product of {a} and {b}?"
    elif form == "percent":
        pct, base = rng.choice((5, 10, 12, 15, 20, 25, 30, 40, 75)), rng.randint(20, 4000)
        # no round(): an integer percentage of an integer has at most 2 decimals, and a
        # calculation that opened with `round(` as an aggregate does made the warm-started policy
        # loop on `round(round(...` (9 of 36 calculations, 2026-12-03)
        # bracketed: `print(PCT * BASE / 100)` was the only golden program that went on from
        # `print(A * B`, and the warm start answered "What is 17 * 23?" with
        # print(17 * 23 / 100) = 3.91 (2026-12-06); PCT / 100 * BASE would print float noise
        # (1.1500000000000001), an integer over 100 prints what the question asks for
        expression, value = f"({pct} * {base}) / 100", pct * base / 100
        question = f"What is {pct}% of {base}? Round to 2 decimals."
    else:
        a, b, c = rng.randint(12, 999), rng.randint(12, 99), rng.randint(2, 999)
        plus = rng.random() < 0.5
        expression, value = f"{a} * {b} {'+' if plus else '-'} {c}", float(a * b + (c if plus else -c))
        question = (f"What is {expression}?" if form == "symbols"
                    else f"Compute {a} times {b} {'plus' if plus else 'minus'} {c}.")
    return {"question": question, "answer": number(value), "answer_type": "numeric", "category": "arithmetic",
            "program": f"print({expression})"}


def _prints_answer(program: str, answer: str, database: dict[str, Any]) -> bool:
    try:
        printed = run_program(program, database)
        return math.isclose(float(printed), float(answer), rel_tol=1e-9, abs_tol=1e-9)
    except Exception:  # any failure means the program is not a golden call
        return False


def synthesize_qa(domain: Domain, n: int, *, seed: int = 0, numeric_fraction: float = 0.4,
                  arithmetic_fraction: float = 0.0) -> list[dict[str, Any]]:
    """`n` distinct QA items (fewer when the database cannot support them); about
    `arithmetic_fraction` of them are calculations (`arithmetic`), the rest about the records.
    Every item names its `domain` (local search is scoped to it)."""
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    database = flat_database(domain)
    tables = [domain.schema.tables[t] for t in domain.layouts if domain.schema.tables[t].n_records]
    for attempt in range(n * 20):
        if len(items) >= n or not tables:
            break
        rng = random.Random(stable_seed("qa", seed, domain.name, attempt))
        gen = _QA(domain, rng)
        ts = rng.choice(tables)
        if arithmetic_fraction and rng.random() < arithmetic_fraction:  # no draw at 0: items as before
            item = arithmetic(rng)
        elif rng.random() < numeric_fraction:
            item = (gen.aggregate(ts) if rng.random() < 0.5 else None) or gen.count(ts)
        else:
            item = gen.lookup(ts)
        if item is None or item["question"] in seen:
            continue
        if "program" in item and not _prints_answer(item["program"], item["answer"], database):
            del item["program"]  # no golden call rather than a wrong one
        seen.add(item["question"])
        items.append({"id": f"{domain.name}-qa-s{seed}-{len(items):04d}", "domain": domain.name, **item})
    return items


def load_qa(path: Any) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
