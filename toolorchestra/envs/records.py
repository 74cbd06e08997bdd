"""A domain's records as the code interpreter sees them: the data behind counts and aggregates.

Counting "how many loans have status equal to 'lost'" or averaging a field over a member's loans
needs every record, not the five passages local search returns: the category that only code
solves over records. An episode of a domain gets a code interpreter whose working folder holds
that domain's database (`sandbox_files`, given by `episodes.environment`), with these names
already defined for the code (the module `data.py`, preloaded):

- `rows(table)`: every record of a table, each a flat dict keyed by its fields' names as the
  questions word them (`human` paths: `fees.late_fee` -> `'fees late fee'`), plus `'id'`; a list
  field keeps its list (`'loans'`);
- `find(table, field, value)`: the one record whose `field` is `value` (an error names the count);
- `count(table, field, value)`: how many records of `table` have `field` equal to `value`;
- `total`, `average`, `maximum`, `minimum` `(field, table, ref_field, owner)`: that statistic of
  `field` over the records of `table` whose `ref_field` refers to `owner` (a record from `find`,
  or an id), rounded to 2 decimals;
- `mean`: `statistics.mean`.

Tables are named as in the database or by their entity (`'loans'`, `'loan'`). The helpers take
their arguments in the order the questions word them, so a program is the question's own words:
"how many loans have status equal to 'lost'" is `print(count('loans', 'status', 'lost'))`, "the
average fees late fee over all loans whose member id refers to the member whose phone is '267'"
is `print(average('fees late fee', 'loans', 'member id', find('members', 'phone', '267')))`. The
first demo with generic comprehensions (`print(sum(r['status'] == 'lost' for r in rows('loans')))`
and a `round(mean(... if r[...] == find(...)['id']), 2)` for aggregates) saw the 135M policy start
a count right and drift into the aggregate's `if ... == find(` clause until the token limit, since
the two shared their opening: a helper per question shape decides the shape at its first token.
`synthesis.qa` writes these programs for every count and aggregate it makes (the SFT warm start's
golden call), checked against the item's answer by `run_program` before it is kept.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.schema import TableSchema, singular
from toolorchestra.envs.state import values_at
from toolorchestra.envs.toolspec import param_of

MODULE = "data"
RECORDS_FILE = "records.json"

DATA_MODULE = '''"""This episode's database: rows, find, count, total, average, maximum, minimum and mean."""
import json
import os
from statistics import mean

__all__ = ["rows", "find", "count", "total", "average", "maximum", "minimum", "mean"]
_DB = None


def _db():
    global _DB
    if _DB is None:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "records.json"), encoding="utf-8") as f:
            _DB = json.load(f)
    return _DB


def _table(name):
    key = " ".join(str(name).replace("_", " ").lower().split())
    if key not in _db()["aliases"]:
        raise KeyError(f"no table {name!r}; tables: {', '.join(sorted(_db()['tables']))}")
    return _db()["aliases"][key]


def rows(table):
    """Every record of `table`: dicts keyed by field names as questions word them, and 'id'."""
    return [dict(r) for r in _db()["tables"][_table(table)]]


def find(table, field, value):
    """The one record of `table` whose `field` is `value`."""
    hits = [r for r in rows(table) if r.get(field) == value]
    if len(hits) != 1:
        fields = sorted({k for r in rows(table) for k in r})
        raise LookupError(f"{len(hits)} records of {table!r} have {field!r} == {value!r}, not one; fields: {fields}")
    return hits[0]


def count(table, field, value):
    """How many records of `table` have `field` equal to `value`."""
    return sum(r.get(field) == value for r in rows(table))


def _over(field, table, ref_field, owner):
    owner_id = owner["id"] if isinstance(owner, dict) else owner
    values = [r[field] for r in rows(table) if r.get(ref_field) == owner_id and isinstance(r.get(field), (int, float))]
    if not values:
        raise LookupError(f"no record of {table!r} with a number in {field!r} has {ref_field!r} == {owner_id!r}")
    return values


def total(field, table, ref_field, owner):
    """The sum of `field` over the records of `table` whose `ref_field` refers to `owner`, to 2 decimals."""
    return round(sum(_over(field, table, ref_field, owner)), 2)


def average(field, table, ref_field, owner):
    """The mean of `field` over the records of `table` whose `ref_field` refers to `owner`, to 2 decimals."""
    return round(mean(_over(field, table, ref_field, owner)), 2)


def maximum(field, table, ref_field, owner):
    """The largest `field` over the records of `table` whose `ref_field` refers to `owner`, to 2 decimals."""
    return round(max(_over(field, table, ref_field, owner)), 2)


def minimum(field, table, ref_field, owner):
    """The smallest `field` over the records of `table` whose `ref_field` refers to `owner`, to 2 decimals."""
    return round(min(_over(field, table, ref_field, owner)), 2)
'''


def human(path: str | tuple[str, ...] | list[str]) -> str:
    """`accounts.*.balance.current` -> `account balance current`."""
    segs = path.replace("[]", ".[]").split(".") if isinstance(path, str) else list(path)
    words: list[str] = []
    for seg in segs:
        if seg in ("[]", "*") or param_of(seg):
            if words:
                words[-1] = singular(words[-1])
            continue
        word = seg.replace("_", " ")
        if words and words[-1].split()[-1] in word.split():
            words.pop()  # name.last_name -> "last name", not "name last name"
        words.append(word)
    return " ".join(w for w in words if w)


def list_key(segments: tuple[str, ...]) -> str | None:
    """The key of a list field (`loans[]` -> `'loans'`) when it is a list directly under the record."""
    if len(segments) >= 2 and segments[-1] == "[]" and "[]" not in segments[:-1] and "*" not in segments:
        return human(segments[:-1])
    return None


def flat_record(ts: TableSchema, rid: Any, record: dict[str, Any]) -> dict[str, Any]:
    """`record` keyed as the questions word its fields: scalars by `human` path, direct lists by
    the list's name; the first field wins a name two fields share."""
    out: dict[str, Any] = {"id": rid}
    for info in ts.fields.values():
        key = list_key(info.segments)
        if key is not None:
            out.setdefault(key, list(values_at(record, info.segments)))
            continue
        if info.repeated or not info.types or set(info.types) <= {"object", "array"}:
            continue
        values = list(values_at(record, info.segments))
        out.setdefault(human(info.segments), values[0] if len(values) == 1 else None)
    return out


def flat_database(domain: Domain) -> dict[str, Any]:
    """`{"tables": {table: [flat records]}, "aliases": {name or entity, spaced: table}}`."""
    from toolorchestra.envs.schema import table_records

    tables: dict[str, list[dict[str, Any]]] = {}
    aliases: dict[str, str] = {}
    for name, layout in domain.layouts.items():
        ts = domain.schema.tables[name]
        tables[name] = [flat_record(ts, rid, rec) for rid, rec in table_records(domain.db[name], layout).items()]
        for alias in (name, ts.entity):
            aliases.setdefault(" ".join(alias.replace("_", " ").lower().split()), name)
    return {"tables": tables, "aliases": aliases}


def sandbox_files(domain: Domain) -> tuple[dict[str, bytes], str]:
    """The files of the domain's code interpreter, and the sentence its description gains."""
    db = flat_database(domain)
    files = {f"{MODULE}.py": DATA_MODULE.encode(), RECORDS_FILE: json.dumps(db, default=str).encode()}
    note = (f"The {domain.name} database is loaded: rows(table) lists a table's records as dicts keyed "
            "by field names as questions word them, and 'id'; find(table, field, value) returns the one "
            "matching record; count(table, field, value); total, average, maximum, minimum(field, table, "
            f"ref_field, owner_record). Tables: {', '.join(db['tables'])}.")
    return files, note


def run_program(program: str, database: dict[str, Any]) -> str:
    """What `program` prints with `database` (`flat_database`'s) loaded, in this process: for
    checking the programs this package writes itself, never model output."""
    module: dict[str, Any] = {}
    exec(compile(DATA_MODULE, f"{MODULE}.py", "exec"), module)
    module["_DB"] = database
    names = {name: module[name] for name in module["__all__"]}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(program, "<program>", "exec"), dict(names))
    return out.getvalue().strip()
