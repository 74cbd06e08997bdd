"""A preference vector as the instruction the policy reads.

The policy only ever saw preferences as text during training (the vector weighted its reward), so
a request's `preference_vector` is rendered with the training grammar's own wording
(`preferences.grammar`): the strength word whose weight is nearest, one sentence per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from toolorchestra.core.errors import ConfigError
from toolorchestra.preferences.grammar import AVOID, AVOID_ASKING, IMPORTANCE, PREFER
from toolorchestra.preferences.pairs import ACCURACY, CALLS, COST, LATENCY, MODELS, known_keys

_PHRASES = {COST: "keeping the bill low", LATENCY: "getting an answer quickly"}


def _nearest(table: Iterable[tuple[str, float]], weight: float) -> str:
    return min(table, key=lambda entry: abs(entry[1] - weight))[0]


def vector_instruction(vector: Mapping[str, float], tools: Iterable[str], models: Iterable[str] = ()) -> str | None:
    """One instruction for `vector` (None when it asks for nothing beyond accuracy); `models` are
    the expert model aliases a `models/<alias>` key may name.

    >>> vector_instruction({"cost": 1.0, "calls/web_search": -2.0}, ["web_search"])
    'I care a lot about keeping the bill low. Never use web_search.'
    >>> vector_instruction({"models/smollm2-vote5": -1.0}, [], ["smollm2-vote5"])
    'Do not ask the smollm2-vote5 expert.'
    """
    tools, models = list(tools), list(models)
    unknown = sorted(set(vector) - known_keys(tools, models))
    if unknown:
        raise ConfigError(None, f"unknown keys {unknown}; known: {sorted(known_keys(tools, models))}",
                          key="orchestra.preference_vector")
    sentences = []
    for key in (COST, LATENCY):
        weight = float(vector.get(key, 0.0))
        if weight > 0:
            sentences.append(f"{_nearest(IMPORTANCE, weight)} {_PHRASES[key]}.")
    for key, weight in sorted(vector.items()):
        if key.startswith(CALLS) and weight:
            table = AVOID if weight < 0 else PREFER
            sentences.append(f"{_nearest(table, abs(weight))} {key.removeprefix(CALLS)}.")
        elif key.startswith(MODELS) and weight < 0:  # the grammar has no "prefer a model" wording
            sentences.append(f"{_nearest(AVOID_ASKING, -weight)} the {key.removeprefix(MODELS)} expert.")
    if not sentences and float(vector.get(ACCURACY, 0.0)) > 0:
        return None
    return " ".join(sentences) or None


def combine(*parts: str | None) -> str | None:
    text = " ".join(p.strip() for p in parts if p and p.strip())
    return text or None
