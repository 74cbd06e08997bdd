"""Preference pairs from LLMs: one proposes, a second verifies (the paper's propose-then-verify).

The proposer sees the catalog's tools and the reward keys and returns a JSON list of
`{"instruction", "vector"}` objects. Every proposal is parsed and checked (known keys, finite
numeric weights, a non-empty instruction, at least one non-zero weight); the verifier then reads
each instruction with its vector and answers YES only if the vector expresses the instruction.
Rejections of every kind are counted in `ProposeStats`, never fatal: with a weak local model most
proposals may be rejected, and the report says so.

Accepted pairs get their kind inferred from the vector (`infer_kind`), intents from the signs of
the weights, and a template id `llm:<hash>` of their own, so the leak-free split treats each as
its own template.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.llm.base import LLM, LLMError
from toolorchestra.preferences.grammar import remote_tools
from toolorchestra.preferences.pairs import (
    ACCURACY,
    CALLS,
    COST,
    LATENCY,
    PreferencePair,
    intents_from_vector,
    known_keys,
    normalise_instruction,
    pair_id,
)
from toolorchestra.tools.catalog import Catalog

MAX_INSTRUCTION_CHARS = 300
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_VERDICT = re.compile(r"\b(yes|no)\b", re.I)


class ProposeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    pairs: int = Field(32, ge=1, le=10_000, description="stop once this many pairs are accepted")
    per_request: int = Field(8, ge=1, le=50)
    max_requests: int = Field(8, ge=1, le=1_000)
    max_tokens: int = Field(768, ge=16, le=131_072)
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    seed: int = 0


class ProposeStats(BaseModel):
    requests: int = 0
    llm_errors: int = 0
    unparseable_replies: int = 0
    proposed: int = 0
    invalid: int = 0
    duplicates: int = 0
    verifier_errors: int = 0
    rejected_by_verifier: int = 0
    accepted: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)

    def reject(self, reason: str) -> None:
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


_KEY_HELP = (
    "Weights (any real numbers) over these keys; omit keys the instruction does not mention:\n"
    "- accuracy: weight on being correct (usually 1).\n"
    "- cost: a POSITIVE weight rewards spending LESS money (the user cares about cost).\n"
    "- latency: a POSITIVE weight rewards answering FASTER.\n"
    "- calls/<tool>: a NEGATIVE weight means the user wants that tool used less or not at all; "
    "a POSITIVE weight means they want it used."
)


def proposer_messages(catalog: Catalog, n: int, avoid: list[str]) -> list[dict[str, str]]:
    tools = "\n".join(f"- {t.name} ({t.kind}): {t.description.split('. ')[0][:140]}" for t in catalog.tools)
    seen = "\n".join(f"- {a}" for a in avoid[-20:]) or "(none yet)"
    return [
        {"role": "system", "content": "You write realistic user preferences for an assistant that solves tasks "
                                      "with tools, and the reward weights that express each preference."},
        {"role": "user", "content": (
            f"Tools:\n{tools}\n\n{_KEY_HELP}\n\n"
            f"Write {n} new, varied preferences a user might state (about cost, speed, privacy, or which tools "
            "to use or avoid). Reply with a JSON list only, e.g.\n"
            '[{"instruction": "Please do not use web search.", "vector": {"accuracy": 1, "calls/web_search": -1}}]\n\n'
            f"Already written (do not repeat):\n{seen}"
        )},
    ]


def verifier_messages(pair: dict[str, Any]) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You check whether reward weights express a user's instruction."},
        {"role": "user", "content": (
            f"{_KEY_HELP}\n\nInstruction: {pair['instruction']}\nWeights: {json.dumps(pair['vector'])}\n\n"
            "Does every weight have the key and sign the instruction asks for, with nothing that contradicts it? "
            "Answer YES or NO."
        )},
    ]


def parse_proposals(text: str) -> list[Any] | None:
    """The JSON list in a reply (bare, or in a ```json fence); None when there is none."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        start = candidate.find("[")
        while start != -1:
            try:
                value, _ = json.JSONDecoder().raw_decode(candidate[start:])
            except json.JSONDecodeError:
                start = candidate.find("[", start + 1)
                continue
            if isinstance(value, list):
                return value
            start = candidate.find("[", start + 1)
    return None


def check_proposal(item: Any, allowed: set[str]) -> tuple[dict[str, Any] | None, str | None]:
    """(clean proposal, None) or (None, reason it was rejected)."""
    if not isinstance(item, dict):
        return None, "not an object"
    instruction, vector = item.get("instruction"), item.get("vector")
    if not isinstance(instruction, str) or not instruction.strip():
        return None, "empty instruction"
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        return None, "instruction too long"
    if not isinstance(vector, dict) or not vector:
        return None, "empty vector"
    clean: dict[str, float] = {}
    for key, weight in vector.items():
        if key not in allowed:
            return None, "unknown key"
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight):
            return None, "weight not a finite number"
        clean[key] = float(weight)
    if not any(clean.values()):
        return None, "all weights zero"
    return {"instruction": " ".join(instruction.split()), "vector": clean}, None


def parse_verdict(text: str) -> bool | None:
    match = _VERDICT.search(text)
    return None if match is None else match.group(1).lower() == "yes"


def infer_kind(vector: dict[str, float], remote: list[str]) -> str:
    """The grammar kind a vector corresponds to, or `mixed`."""
    calls = {k[len(CALLS):]: w for k, w in vector.items() if k.startswith(CALLS) and w}
    plain = {k for k, w in vector.items() if k in (COST, LATENCY) and w > 0}
    if not calls:
        if plain == {COST, LATENCY}:
            return "cost_latency"
        if plain:
            return next(iter(plain))
        return "accuracy" if vector.get(ACCURACY, 0) > 0 and len(vector) == 1 else "mixed"
    if plain:
        return "mixed"
    if all(w < 0 for w in calls.values()):
        if remote and set(calls) == set(remote) and len(remote) > 1:
            return "local_only"
        return "avoid_tool" if len(calls) == 1 else "mixed"
    if all(w > 0 for w in calls.values()) and len(calls) == 1:
        return "prefer_tool"
    return "mixed"


def propose_pairs(proposer: LLM, verifier: LLM, catalog: Catalog,
                  config: ProposeConfig) -> tuple[list[PreferencePair], ProposeStats]:
    """Ask `proposer` for pairs until `config.pairs` pass `verifier` or the requests run out."""
    allowed = known_keys((t.name for t in catalog.tools), catalog.models)
    remote = remote_tools(catalog)
    stats = ProposeStats()
    accepted: list[PreferencePair] = []
    seen: set[str] = set()
    for request in range(config.max_requests):
        if len(accepted) >= config.pairs:
            break
        stats.requests += 1
        try:
            reply = proposer.chat(proposer_messages(catalog, config.per_request, [p.instruction for p in accepted]),
                                  max_tokens=config.max_tokens, temperature=config.temperature,
                                  seed=config.seed + request)
        except LLMError:
            stats.llm_errors += 1
            continue
        items = parse_proposals(reply.text)
        if items is None:
            stats.unparseable_replies += 1
            continue
        for item in items:
            if len(accepted) >= config.pairs:
                break
            stats.proposed += 1
            proposal, reason = check_proposal(item, allowed)
            if proposal is None:
                stats.invalid += 1
                stats.reject(reason or "invalid")
                continue
            key = normalise_instruction(proposal["instruction"])
            if key in seen:
                stats.duplicates += 1
                continue
            seen.add(key)
            try:
                verdict = parse_verdict(verifier.chat(verifier_messages(proposal), max_tokens=8,
                                                      temperature=0.0).text)
            except LLMError:
                stats.verifier_errors += 1
                continue
            if verdict is not True:
                stats.rejected_by_verifier += 1
                stats.reject("verifier said no" if verdict is False else "verifier gave no verdict")
                continue
            kind = infer_kind(proposal["vector"], remote)
            intents = intents_from_vector(proposal["vector"])
            digest = pair_id(kind, proposal["instruction"], proposal["vector"])
            accepted.append(PreferencePair(
                id=digest, instruction=proposal["instruction"], vector=proposal["vector"], kind=kind,
                template=f"llm:{digest.rsplit('-', 1)[-1]}", intents=intents, source="llm",
            ))
            stats.accepted += 1
    return accepted, stats
