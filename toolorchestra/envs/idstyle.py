"""Id styles: recognise how a table names its records and mint new ids in the same style.

Styles: `sequence` (a fixed prefix and a counter, e.g. `task_3`, `ORD-0042`), `integer` (1, 2, ...),
`uuid`, and `pattern` (fixed length with a character class per position, e.g. `J5IXN2S-M1` ->
seven upper-case/digit characters then `-M1`). New ids are deterministic: they depend only on the
style, the ids that exist and how many records this state already created, so replaying the same
golden actions twice mints the same ids and gives the same database hash.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
import uuid
from collections import Counter
from collections.abc import Collection
from typing import Any, Literal

from pydantic import BaseModel

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
_SEQ = re.compile(r"^(.*?)(\d+)$")
_CLASSES = {"A": string.ascii_uppercase, "a": string.ascii_lowercase, "9": string.digits}


class IdStyle(BaseModel):
    kind: Literal["sequence", "integer", "uuid", "pattern"]
    prefix: str = ""
    width: int = 0
    """Zero-padding width of the counter (0: no padding)."""
    max: int = 0
    """Largest counter seen."""
    template: list[str] = []
    """Per position: a literal character, or a class made of `A` (upper), `a` (lower), `9` (digit)
    written as `[A9]`."""

    def describe(self) -> str:
        if self.kind == "sequence":
            return f"'{self.prefix}' + {'a %d-digit' % self.width if self.width else 'a'} number"
        if self.kind == "pattern":
            return "".join(t if not t.startswith("[") else "X" for t in self.template)
        return self.kind


def _char_class(chars: set[str]) -> str:
    cls = ""
    if any(c.isupper() for c in chars):
        cls += "A"
    if any(c.islower() for c in chars):
        cls += "a"
    if any(c.isdigit() for c in chars):
        cls += "9"
    return f"[{cls}]"


def infer_id_style(ids: list[Any]) -> IdStyle | None:
    if not ids:
        return None
    if all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        return IdStyle(kind="integer", max=max(ids))
    ids = [str(i) for i in ids]
    if all(_UUID.match(i) for i in ids):
        return IdStyle(kind="uuid")
    matches = [_SEQ.match(i) for i in ids]
    prefixes = Counter(m.group(1) for m in matches if m)
    if prefixes:
        prefix, count = prefixes.most_common(1)[0]
        # A shared prefix on (nearly) all ids means a counter; random ids rarely share one.
        if count >= 0.8 * len(ids) and (len(ids) < 3 or count >= 3):
            digits = [m.group(2) for m in matches if m and m.group(1) == prefix]
            widths = {len(d) for d in digits}
            padded = len(widths) == 1 and any(d.startswith("0") for d in digits)
            return IdStyle(
                kind="sequence", prefix=prefix, width=widths.pop() if padded else 0,
                max=max(int(d) for d in digits),
            )
    length = Counter(len(i) for i in ids).most_common(1)[0][0]
    same = [i for i in ids if len(i) == length]
    template = []
    for pos in range(length):
        chars = {i[pos] for i in same}
        # With few examples every position looks fixed; only trust literals seen many times.
        if len(chars) == 1 and (len(same) >= 5 or not chars.pop().isalnum()):
            template.append(same[0][pos])
        else:
            alnum = {c for c in (i[pos] for i in same) if c.isalnum()}
            template.append(_char_class(alnum) if alnum else same[0][pos])
    return IdStyle(kind="pattern", template=template)


def _rng(salt: str, n: int, attempt: int) -> random.Random:
    digest = hashlib.blake2b(f"{salt}|{n}|{attempt}".encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


def next_id(style: IdStyle | None, existing: Collection[Any], *, salt: str, n_created: int) -> Any:
    """A new id in `style` not in `existing`; deterministic in (style, existing, salt, n_created)."""
    style = style or IdStyle(kind="pattern", template=["[A9]"] * 8)
    for attempt in range(10_000):
        if style.kind == "integer":
            candidate: Any = style.max + 1 + n_created + attempt
        elif style.kind == "sequence":
            number = style.max + 1 + n_created + attempt
            candidate = f"{style.prefix}{number:0{style.width}d}" if style.width else f"{style.prefix}{number}"
        elif style.kind == "uuid":
            candidate = str(uuid.UUID(int=_rng(salt, n_created, attempt).getrandbits(128), version=4))
        else:
            rng = _rng(salt, n_created, attempt)
            candidate = "".join(
                rng.choice("".join(_CLASSES[c] for c in t[1:-1])) if t.startswith("[") and len(t) > 2 else t
                for t in style.template
            )
        if candidate not in existing:
            return candidate
    raise RuntimeError(f"could not mint a new id in style {style.describe()}: id space exhausted")
