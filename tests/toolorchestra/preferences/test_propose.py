"""Propose-then-verify with scripted proposer and verifier models."""

from __future__ import annotations

import json

from helpers.pref_fixtures import BAD_SIGN, GOOD, NOT_FINITE, UNKNOWN_KEY, KeywordVerifier, Scripted

from toolorchestra.llm.base import LLMError
from toolorchestra.preferences.pairs import check_direction
from toolorchestra.preferences.propose import (
    ProposeConfig,
    infer_kind,
    parse_proposals,
    parse_verdict,
    propose_pairs,
)
from toolorchestra.tools.catalog import load_embedded_catalog


def test_only_parsed_valid_and_verified_pairs_are_kept():
    catalog = load_embedded_catalog()
    reply = "Here you go:\n```json\n" + json.dumps([*GOOD, BAD_SIGN, UNKNOWN_KEY, NOT_FINITE, GOOD[0], "x"]) + "\n```"
    proposer = Scripted([reply, "I cannot do that", LLMError("down")])
    pairs, stats = propose_pairs(proposer, KeywordVerifier(), catalog, ProposeConfig(pairs=10, max_requests=3))
    assert [p.instruction for p in pairs] == [g["instruction"] for g in GOOD]
    assert stats.requests == 3 and stats.unparseable_replies == 1 and stats.llm_errors == 1
    assert stats.proposed == 7 and stats.invalid == 3 and stats.duplicates == 1
    assert stats.rejected_by_verifier == 1 and stats.accepted == 2
    assert stats.reasons == {"unknown key": 1, "weight not a finite number": 1, "not an object": 1,
                             "verifier said no": 1}
    assert [p.kind for p in pairs] == ["avoid_tool", "cost"]
    assert all(p.source == "llm" and p.template.startswith("llm:") for p in pairs)
    assert all(check_direction(p) == [] for p in pairs)
    # the proposer saw the catalog's tools and the reward keys
    prompt = proposer.seen[0][-1]["content"]
    assert "web_search" in prompt and "calls/<tool>" in prompt


def test_stops_once_enough_pairs_are_accepted():
    proposer = Scripted([json.dumps(GOOD)] * 5)
    pairs, stats = propose_pairs(proposer, KeywordVerifier(), load_embedded_catalog(), ProposeConfig(pairs=1))
    assert len(pairs) == 1 and stats.requests == 1


def test_parsers():
    assert parse_proposals('junk [1, 2') is None
    assert parse_proposals('x [not json] then [{"a": 1}]') == [{"a": 1}]
    assert parse_verdict("Yes.") is True and parse_verdict("no") is False and parse_verdict("maybe") is None


def test_infer_kind():
    remote = ["web_search", "answer"]
    assert infer_kind({"accuracy": 1}, remote) == "accuracy"
    assert infer_kind({"cost": 1, "latency": 1}, remote) == "cost_latency"
    assert infer_kind({"latency": 2}, remote) == "latency"
    assert infer_kind({"calls/web_search": -1, "calls/answer": -1}, remote) == "local_only"
    assert infer_kind({"calls/answer": 1}, remote) == "prefer_tool"
    assert infer_kind({"calls/answer": 1, "cost": 1}, remote) == "mixed"
