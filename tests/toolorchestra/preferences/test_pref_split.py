"""The leak-free split: no instruction, template or vector in both splits; held-out kinds in eval only."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolorchestra.preferences.grammar import generate_grammar_pairs
from toolorchestra.preferences.pairs import PreferencePair, normalise_instruction
from toolorchestra.preferences.split import SplitConfig, groups, leaks, split_pairs
from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog

REPO = Path(__file__).resolve().parents[3]


def assert_leak_free(train, evaluation):
    for attr in (lambda p: normalise_instruction(p.instruction), lambda p: p.template, lambda p: p.vector_key):
        assert not {attr(p) for p in train} & {attr(p) for p in evaluation}
    assert leaks(train, evaluation) == []


@pytest.mark.parametrize("catalog", [load_embedded_catalog(), load_catalog(REPO / "infra/catalogs/paper.yaml")])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grammar_split_is_leak_free_with_heldout_kinds(catalog, seed):
    pairs, _ = generate_grammar_pairs(catalog, seed=seed)
    config = SplitConfig(eval_fraction=0.25, heldout_kinds=["cost_latency", "local_only"], seed=seed)
    train, evaluation = split_pairs(pairs, config)
    assert sorted(p.id for p in train + evaluation) == sorted(p.id for p in pairs)
    assert_leak_free(train, evaluation)
    train_kinds, eval_kinds = {p.kind for p in train}, {p.kind for p in evaluation}
    assert {"cost_latency", "local_only"} <= eval_kinds and not {"cost_latency", "local_only"} & train_kinds
    # every trained kind with more than one block is also evaluated (on unseen templates and vectors)
    assert {"cost", "latency", "avoid_tool", "prefer_tool"} <= eval_kinds & train_kinds
    assert 0.15 < len(evaluation) / len(pairs) < 0.5


def _pair(i, text, template, vector, kind="cost"):
    return PreferencePair(id=f"p{i}", instruction=text, vector=vector, kind=kind, template=template,
                          intents=[{"key": "accuracy", "prefer": "higher"}])


def test_shared_keys_pull_pairs_together():
    pairs = [
        _pair(1, "a", "t1", {"accuracy": 1.0}),
        _pair(2, "b", "t2", {"accuracy": 1.0}),            # shares p1's vector
        _pair(3, "c", "t2", {"accuracy": 2.0}),            # shares p2's template
        _pair(4, "A.", "t4", {"accuracy": 3.0}),           # shares p1's text (after normalising)
        _pair(5, "e", "t5", {"accuracy": 5.0}),
        _pair(6, "f", "t6", {"accuracy": 6.0}, kind="local_only"),
        _pair(7, "g", "t7", {"accuracy": 5.0}),            # shares p5's vector: follows it
        _pair(8, "h", "t8", {"accuracy": 8.0}),
    ]
    assert groups(pairs) == [[0, 1, 2, 3], [4, 6], [5], [7]]
    train, evaluation = split_pairs(pairs, SplitConfig(eval_fraction=0.34, heldout_kinds=["local_only"]))
    assert_leak_free(train, evaluation)
    assert "p6" in {p.id for p in evaluation}
    assert {p.kind for p in evaluation} == {"cost", "local_only"} and {p.kind for p in train} == {"cost"}


def test_no_eval_fraction_keeps_only_heldout_in_eval():
    pairs, _ = generate_grammar_pairs(load_embedded_catalog())
    train, evaluation = split_pairs(pairs, SplitConfig(eval_fraction=0.0, heldout_kinds=["local_only"]))
    assert {p.kind for p in evaluation} == {"local_only"}
    assert_leak_free(train, evaluation)
