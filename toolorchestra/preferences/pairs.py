"""A user preference: a natural-language instruction and the weight vector the reward uses.

The vector's keys are the reward's (`toolorchestra.episodes.reward`): `accuracy`, `cost`, `latency`,
`calls/<tool>` for a tool of the catalog in use and `models/<alias>` for one of its models (calls
served by that expert model). Positive weights reward more of the (already oriented) quantity: a
positive `cost` weight rewards *cheaper* rollouts, a negative `calls/web_search` weight rewards
calling web search *less* (avoidance), a negative `models/smollm2-vote5` weight asking that
expert less.

Each pair also states its **intents**: what the instruction asks for, as (key, `lower` | `higher`)
claims ("do not use web search" -> `calls/web_search` lower; "keep costs down" -> `cost` lower).
`check_direction(pair)` builds two otherwise-equal correct rollouts per intent and asserts that
the reward (`toolorchestra.episodes.reward.group_rewards`, the one training uses) ranks them as the
instruction says.

Pairs are stored one JSON object per line (`save_pairs` / `load_pairs`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_jsonl
from toolorchestra.episodes.instance import Preference
from toolorchestra.episodes.reward import ACCURACY, COST, LATENCY, group_rewards
from toolorchestra.episodes.reward import CALLS_PREFIX as CALLS
from toolorchestra.episodes.reward import MODELS_PREFIX as MODELS


def known_keys(tool_names: Iterable[str], model_aliases: Iterable[str] = ()) -> set[str]:
    """Every key a preference vector may use for a catalog with these tools and models."""
    return ({ACCURACY, COST, LATENCY} | {f"{CALLS}{name}" for name in tool_names}
            | {f"{MODELS}{alias}" for alias in model_aliases})


def vector_key(vector: Mapping[str, float]) -> str:
    """Canonical text of a vector (sorted keys, weights rounded) for equality across splits."""
    return json.dumps({k: round(float(v), 6) for k, v in sorted(vector.items())}, sort_keys=True)


def normalise_instruction(text: str) -> str:
    """Instruction text as compared for duplicates and leakage: case and spacing ignored."""
    return " ".join(text.casefold().split()).rstrip(".!")


class Intent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    prefer: Literal["lower", "higher"]


class PreferencePair(Preference):
    """One preference (instruction, vector, kind: what an episode reads) and where it came from."""

    template: str = Field(min_length=1, description="template id (grammar) or llm:<hash> (proposed)")
    intents: list[Intent] = Field(min_length=1)
    source: Literal["grammar", "llm"] = "grammar"
    slots: dict[str, str] = Field(default_factory=dict, description="what filled the template")

    @property
    def vector_key(self) -> str:
        return vector_key(self.vector)


def pair_id(kind: str, instruction: str, vector: Mapping[str, float]) -> str:
    digest = hashlib.sha256(f"{normalise_instruction(instruction)}|{vector_key(vector)}".encode()).hexdigest()
    return f"{kind}-{digest[:10]}"


def intents_from_vector(vector: Mapping[str, float]) -> list[Intent]:
    """What a vector claims, by the sign of each weight (used for LLM-proposed pairs)."""
    intents = []
    for key, weight in sorted(vector.items()):
        if weight == 0:
            continue
        if key in (COST, LATENCY):
            intents.append(Intent(key=key, prefer="lower" if weight > 0 else "higher"))
        else:
            intents.append(Intent(key=key, prefer="higher" if weight > 0 else "lower"))
    return intents


# ------------------------------------------------------------------------------ direction check


def _rollouts_for(intent: Intent) -> tuple[list[dict[str, float]], list[bool], int]:
    """Two rollouts identical except in the intent's key; returns (metrics, correct, index of the
    rollout the instruction prefers)."""
    base = {COST: 0.01, LATENCY: 2.0}
    if intent.key == ACCURACY:
        # Accuracy can only differ by outcome: the instruction prefers the correct rollout.
        return [dict(base), dict(base)], [True, False], 0 if intent.prefer == "higher" else 1
    low, high = dict(base), dict(base)
    if intent.key in (COST, LATENCY):
        high[intent.key] = base[intent.key] * 3
    else:
        low[intent.key], high[intent.key] = 0.0, 2.0
    return [low, high], [True, True], 0 if intent.prefer == "lower" else 1


def check_direction(pair: PreferencePair) -> list[str]:
    """Problems (empty when fine): for each intent, the reward of two otherwise-equal rollouts
    must rank the one the instruction prefers strictly higher."""
    problems = []
    for intent in pair.intents:
        if intent.key not in pair.vector:
            problems.append(f"{pair.id}: intent on {intent.key!r} but the vector has no such key")
            continue
        metrics, correct, winner = _rollouts_for(intent)
        rewards = group_rewards(metrics, correct, pair.vector)
        if not rewards[winner] > rewards[1 - winner]:
            problems.append(
                f"{pair.id}: {intent.key} {intent.prefer} should win, but rewards are {rewards} "
                f"for {pair.instruction!r} with {pair.vector}")
    return problems


def check_directions(pairs: Iterable[PreferencePair]) -> list[str]:
    return [problem for pair in pairs for problem in check_direction(pair)]


# ------------------------------------------------------------------------------ files


def save_pairs(path: str | Path, pairs: Iterable[PreferencePair]) -> Path:
    return atomic_write_jsonl(path, [p.model_dump(mode="json") for p in pairs])


def load_pairs(path: str | Path) -> list[PreferencePair]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, "preference file not found (run the preferences stage first)")
    pairs = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            pairs.append(PreferencePair.model_validate_json(line))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(path, f"line {lineno}: {'.'.join(map(str, err['loc'])) or '<row>'}: {err['msg']}") from None
    return pairs


def pair_rows(pairs: Iterable[PreferencePair]) -> list[dict[str, Any]]:
    return [p.model_dump(mode="json") for p in pairs]
