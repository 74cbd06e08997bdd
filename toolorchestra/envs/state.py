"""Database state: a shared read-only base plus a per-episode copy-on-write overlay.

Replaying a task must start from a fresh copy of the database. Deep-copying a 1.6 MB database per
task costs tens of milliseconds; here a fresh state is an empty overlay over the shared base
(O(1)), a write copies only the record it touches, and the state hash is maintained incrementally:
the hash is the sum (mod 2^128) of a 128-bit BLAKE2b digest per `(table, id, record)`, so a state's
hash is the base's hash minus the digests of the records it replaced plus those of their new
versions. Two states with the same records therefore hash equal however they were reached; the
order of records in a list table is not part of the hash.

Records returned by `get`/`items` are read-only views of shared data: write only through
`writable`, `insert` and `delete`.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from toolorchestra.envs.idstyle import IdStyle, infer_id_style
from toolorchestra.envs.schema import TableLayout, table_records

_MOD = 1 << 128
_DELETED = object()


def record_digest(table: str, rid: Any, record: Any) -> int:
    text = json.dumps([table, rid, record], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest(), "big")


def values_at(node: Any, segments: list[str] | tuple[str, ...]) -> Iterator[Any]:
    """Every value at a read path (`[]`: each list item, `*`: each keyed-map entry)."""
    if not segments:
        yield node
        return
    seg, rest = segments[0], segments[1:]
    if seg == "[]":
        if isinstance(node, list):
            for item in node:
                yield from values_at(item, rest)
    elif seg == "*":
        if isinstance(node, dict):
            for item in node.values():
                yield from values_at(item, rest)
    elif isinstance(node, dict) and seg in node:
        yield from values_at(node[seg], rest)


def _norm(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


class BaseDb:
    """The read-only database shared by every state: records by id, digests and lazy indexes."""

    def __init__(self, db: dict[str, Any], layouts: dict[str, TableLayout]) -> None:
        self.db = db
        self.layouts = layouts
        self.records = {t: table_records(db[t], lay) for t, lay in layouts.items()}
        self._digests: dict[str, dict[Any, int]] | None = None
        self._total = 0
        self._exact: dict[tuple[str, tuple[str, ...]], dict[Any, list[Any]]] = {}
        self._texts: dict[tuple[str, tuple[str, ...]], list[tuple[Any, str]]] = {}
        self._styles: dict[str, IdStyle | None] = {}

    def digests(self) -> dict[str, dict[Any, int]]:
        if self._digests is None:
            digests = {t: {rid: record_digest(t, rid, rec) for rid, rec in recs.items()} for t, recs in self.records.items()}
            self._total = sum(d for recs in digests.values() for d in recs.values()) % _MOD
            self._digests = digests
        return self._digests

    def total(self) -> int:
        self.digests()
        return self._total

    def exact_index(self, table: str, segments: tuple[str, ...]) -> dict[Any, list[Any]]:
        key = (table, segments)
        if key not in self._exact:
            index: dict[Any, list[Any]] = {}
            for rid, rec in self.records[table].items():
                for value in {_norm(v) for v in values_at(rec, segments) if not isinstance(v, (dict, list))}:
                    index.setdefault(value, []).append(rid)
            self._exact[key] = index
        return self._exact[key]

    def text_index(self, table: str, segments: tuple[str, ...]) -> list[tuple[Any, str]]:
        key = (table, segments)
        if key not in self._texts:
            self._texts[key] = [
                (rid, " ".join(str(v).casefold() for v in values_at(rec, segments) if isinstance(v, (str, int, float))))
                for rid, rec in self.records[table].items()
            ]
        return self._texts[key]

    def id_style(self, table: str) -> IdStyle | None:
        if table not in self._styles:
            self._styles[table] = infer_id_style(list(self.records[table]))
        return self._styles[table]


class DbState:
    """One episode's mutable view of a `BaseDb`."""

    def __init__(self, base: BaseDb) -> None:
        self.base = base
        self._over: dict[str, dict[Any, Any]] = {}
        self._created: dict[str, list[Any]] = {}

    # -- reads
    def tables(self) -> list[str]:
        return list(self.base.layouts)

    def has_table(self, table: str) -> bool:
        return table in self.base.layouts

    def get(self, table: str, rid: Any) -> dict[str, Any] | None:
        over = self._over.get(table)
        if over is not None and rid in over:
            rec = over[rid]
            return None if rec is _DELETED else rec
        return self.base.records[table].get(rid)

    def exists(self, table: str, rid: Any) -> bool:
        return self.get(table, rid) is not None

    def ids(self, table: str) -> list[Any]:
        over = self._over.get(table)
        if not over:
            return list(self.base.records[table])
        kept = [rid for rid in self.base.records[table] if over.get(rid, None) is not _DELETED]
        return kept + [rid for rid in self._created.get(table, []) if over.get(rid) is not _DELETED]

    def items(self, table: str) -> Iterator[tuple[Any, dict[str, Any]]]:
        for rid in self.ids(table):
            yield rid, self.get(table, rid)  # type: ignore[misc]

    def find_exact(self, table: str, segments: list[str], value: Any) -> list[Any]:
        segs = tuple(segments)
        hits = self.base.exact_index(table, segs).get(_norm(value), [])
        over = self._over.get(table)
        if not over:
            return list(hits)
        target = _norm(value)
        matched = {rid for rid in hits if rid not in over}
        for rid, rec in over.items():
            if rec is not _DELETED and any(_norm(v) == target for v in values_at(rec, segs)):
                matched.add(rid)
        return [rid for rid in self.ids(table) if rid in matched]

    def find_contains(self, table: str, segments: list[str], text: str) -> list[Any]:
        segs, needle = tuple(segments), text.casefold()
        over = self._over.get(table) or {}
        matched = [rid for rid, hay in self.base.text_index(table, segs) if needle in hay and rid not in over]
        if not over:
            return matched
        extra = {
            rid for rid, rec in over.items()
            if rec is not _DELETED and any(needle in str(v).casefold() for v in values_at(rec, segs))
        }
        keep = set(matched) | extra
        return [rid for rid in self.ids(table) if rid in keep]

    # -- writes
    def writable(self, table: str, rid: Any) -> dict[str, Any]:
        """The record, copied into this state on first write (raises KeyError if absent)."""
        over = self._over.setdefault(table, {})
        rec = over.get(rid)
        if rec is not None and rec is not _DELETED:
            return rec
        if rec is _DELETED or rid not in self.base.records[table]:
            raise KeyError(rid)
        rec = copy.deepcopy(self.base.records[table][rid])
        over[rid] = rec
        return rec

    def insert(self, table: str, rid: Any, record: dict[str, Any]) -> None:
        if self.exists(table, rid):
            raise KeyError(f"{table} already has a record {rid!r}")
        self._over.setdefault(table, {})[rid] = record
        if rid not in self.base.records[table]:
            self._created.setdefault(table, []).append(rid)

    def delete(self, table: str, rid: Any) -> None:
        if not self.exists(table, rid):
            raise KeyError(rid)
        self._over.setdefault(table, {})[rid] = _DELETED

    def n_created(self, table: str) -> int:
        return len(self._created.get(table, []))

    # -- identity
    def hash(self) -> str:
        """Order-independent hash of all records (equal states hash equal)."""
        total = self.base.total()
        digests = self.base.digests()
        for table, over in self._over.items():
            for rid, rec in over.items():
                if rid in digests[table]:
                    total -= digests[table][rid]
                if rec is not _DELETED:
                    total += record_digest(table, rid, rec)
        return f"{total % _MOD:032x}"

    def to_db(self) -> dict[str, Any]:
        """The state as a database in the original layout (unchanged records are shared)."""
        out: dict[str, Any] = {}
        for table, layout in self.base.layouts.items():
            if not self._over.get(table):
                out[table] = self.base.db[table]
            elif layout.kind == "map":
                out[table] = {rid: rec for rid, rec in self.items(table)}
            else:
                out[table] = [rec for _, rec in self.items(table)]
        return out

    def fork(self) -> DbState:
        """An independent copy of this state (copies only the overlay)."""
        twin = DbState(self.base)
        twin._over = {t: {rid: (rec if rec is _DELETED else copy.deepcopy(rec)) for rid, rec in over.items()} for t, over in self._over.items()}
        twin._created = {t: list(ids) for t, ids in self._created.items()}
        return twin
