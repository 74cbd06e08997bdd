"""Split preference pairs into train and eval without leakage, holding out whole kinds.

Leakage here means anything the policy could memorise in training and meet again in evaluation:
the same instruction text (case and spacing ignored), the same template, or the same vector. Pairs
are joined into groups with union-find whenever they share any of the three, and a group goes
wholly to one side, so by construction no instruction, template or vector appears in both splits.

Held-out kinds (e.g. `cost_latency`, `local_only`) go only to eval, together with every group they
touch: eval then measures generalisation to kinds of preference never trained on. Of the remaining
groups, about `eval_fraction` of each kind go to eval (at least one group per kind when a kind has
two or more, and never all of them), drawn with a seeded shuffle, so eval covers the trained kinds
too. A kind with a single group stays in train.

The grammar generates pairs block-diagonally (`grammar.py`), so its groups are its blocks; pairs
from an LLM are their own templates and group only through shared vectors or texts.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.preferences.pairs import PreferencePair, normalise_instruction


class SplitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    eval_fraction: float = Field(0.25, ge=0.0, le=1.0)
    heldout_kinds: list[str] = Field(default_factory=lambda: ["cost_latency", "local_only"])
    seed: int = 0


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def leakage_keys(pair: PreferencePair) -> list[str]:
    return [f"text:{normalise_instruction(pair.instruction)}", f"template:{pair.template}", f"vector:{pair.vector_key}"]


def groups(pairs: list[PreferencePair]) -> list[list[int]]:
    """Indices of pairs joined by any shared instruction, template or vector (in input order)."""
    uf = _UnionFind(len(pairs))
    first: dict[str, int] = {}
    for i, pair in enumerate(pairs):
        for key in leakage_keys(pair):
            if key in first:
                uf.union(first[key], i)
            else:
                first[key] = i
    members: dict[int, list[int]] = defaultdict(list)
    for i in range(len(pairs)):
        members[uf.find(i)].append(i)
    return sorted(members.values(), key=lambda g: g[0])


def split_pairs(pairs: list[PreferencePair], config: SplitConfig) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, eval): see the module docstring."""
    heldout = set(config.heldout_kinds)
    rng = random.Random(config.seed)
    to_eval: set[int] = set()
    by_kind: dict[str, list[list[int]]] = defaultdict(list)
    for group in groups(pairs):
        if any(pairs[i].kind in heldout for i in group):
            to_eval.add(group[0])
        else:
            by_kind[pairs[group[0]].kind].append(group)
    chosen: set[int] = set()
    for kind in sorted(by_kind):
        kind_groups = by_kind[kind]
        rng.shuffle(kind_groups)
        n_eval = 0
        if config.eval_fraction > 0 and len(kind_groups) >= 2:
            # At least one group in eval and at least one in train: a trained kind must be trained.
            n_eval = min(max(1, round(config.eval_fraction * len(kind_groups))), len(kind_groups) - 1)
        chosen.update(g[0] for g in kind_groups[:n_eval])
    to_eval |= chosen
    train, evaluation = [], []
    for group in groups(pairs):
        side = evaluation if group[0] in to_eval else train
        side.extend(pairs[i] for i in group)
    return train, evaluation


def leaks(train: Iterable[PreferencePair], evaluation: Iterable[PreferencePair]) -> list[str]:
    """Every instruction, template or vector found in both splits (empty when leak-free)."""
    seen = {key for pair in train for key in leakage_keys(pair)}
    return sorted({key for pair in evaluation for key in leakage_keys(pair) if key in seen})
