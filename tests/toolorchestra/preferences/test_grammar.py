"""Grammar-generated preference pairs: every pair ranks rollouts the way its instruction says."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.pref_fixtures import expert_catalog_data

from toolorchestra.episodes.reward import group_rewards
from toolorchestra.preferences.grammar import KINDS, generate_grammar_pairs, remote_models, remote_tools
from toolorchestra.preferences.pairs import check_direction
from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog, parse_catalog

REPO = Path(__file__).resolve().parents[3]
NEGATIONS = ("never use", "avoid using", "try not to use")


def catalogs():
    return {
        "embedded": load_embedded_catalog(),
        "paper": load_catalog(REPO / "infra" / "catalogs" / "paper.yaml"),
        "test": parse_catalog(expert_catalog_data(), source="test"),
    }


def _rewards_of(pair, metrics, correct):
    return group_rewards(metrics, correct, pair.vector)


@pytest.mark.parametrize("name", ["embedded", "paper", "test"])
def test_every_pair_ranks_two_otherwise_equal_rollouts_as_instructed(name):
    catalog = catalogs()[name]
    pairs, notes = generate_grammar_pairs(catalog)
    assert {p.kind for p in pairs} == set(KINDS) and not notes
    base = {"cost": 0.02, "latency": 3.0}
    for pair in pairs:
        assert check_direction(pair) == [], pair
        if pair.kind in ("cost", "cost_latency"):  # cheaper wins under "cost"
            cheap, dear = _rewards_of(pair, [dict(base), {**base, "cost": 0.05}], [True, True])
            assert cheap > dear, pair.instruction
        if pair.kind in ("latency", "cost_latency"):
            fast, slow = _rewards_of(pair, [dict(base), {**base, "latency": 9.0}], [True, True])
            assert fast > slow, pair.instruction
        if pair.kind in ("avoid_tool", "local_only"):  # the avoided tool loses under "avoid"
            for tool in pair.tools:
                clean, used = _rewards_of(pair, [dict(base), {**base, f"calls/{tool}": 1}], [True, True])
                assert clean > used, (pair.instruction, tool)
        if pair.kind in ("avoid_model", "local_only"):  # asking an avoided model loses
            for key in [k for k in pair.vector if k.startswith("models/")]:
                clean, used = _rewards_of(pair, [dict(base), {**base, key: 1}], [True, True])
                assert clean > used, (pair.instruction, key)
        if pair.kind == "prefer_tool":
            (tool,) = pair.tools
            skipped, used = _rewards_of(pair, [dict(base), {**base, f"calls/{tool}": 1}], [True, True])
            assert used > skipped, pair.instruction
        right, wrong = _rewards_of(pair, [dict(base), dict(base)], [True, False])
        assert right > wrong


@pytest.mark.parametrize("name", ["embedded", "paper"])
def test_instruction_text_names_what_the_vector_weighs(name):
    catalog = catalogs()[name]
    pairs, _ = generate_grammar_pairs(catalog)
    for pair in pairs:
        text = pair.instruction.lower()
        if pair.kind in ("avoid_tool", "prefer_tool"):
            (tool,) = pair.tools
            assert tool.replace("_", " ") in text or f"`{tool}`" in text, pair.instruction
            negated = any(n in text for n in NEGATIONS)
            assert negated == (pair.kind == "avoid_tool"), pair.instruction
        if pair.kind == "avoid_model":
            (key,) = [k for k in pair.vector if k != "accuracy"]
            assert key.startswith("models/") and pair.vector[key] < 0
            assert key.removeprefix("models/") in pair.instruction, pair.instruction
            assert "ask" in text or "model" in text, pair.instruction
        if pair.kind == "cost":
            assert any(w in text for w in ("cost", "bill", "spend", "cheap", "price", "money")), pair.instruction
        if pair.kind == "local_only":
            assert any(w in text for w in ("local", "machine", "here", "external", "cloud")), pair.instruction
        if "More than accuracy" in pair.instruction:
            assert max(v for k, v in pair.vector.items() if k != "accuracy") > pair.vector["accuracy"]


def test_remote_tools_and_local_only_for_an_all_local_catalog():
    cats = catalogs()
    assert remote_tools(cats["embedded"]) == ["web_search"]
    assert remote_models(cats["embedded"]) == []
    assert set(remote_tools(cats["paper"])) == {"web_search", "search", "enhance_reasoning", "answer"}
    local = cats["embedded"].subset(["code_interpreter", "ask_direct"])
    pairs, notes = generate_grammar_pairs(local)
    assert "local_only" in notes and "local_only" not in {p.kind for p in pairs}


def test_generation_is_seeded_unique_and_block_diagonal():
    catalog = catalogs()["embedded"]
    a, _ = generate_grammar_pairs(catalog, seed=1)
    b, _ = generate_grammar_pairs(catalog, seed=1)
    c, _ = generate_grammar_pairs(catalog, seed=2)
    assert [p.id for p in a] == [p.id for p in b]
    assert {p.id for p in a} != {p.id for p in c}  # another seed combines templates and fillings differently
    assert len({p.instruction for p in a}) == len(a) and len({p.id for p in a}) == len(a)
    for kind in KINDS:
        blocks_of_template, blocks_of_vector = {}, {}
        for p in (p for p in a if p.kind == kind):
            blocks_of_template.setdefault(p.template, set()).add(p.slots["block"])
            blocks_of_vector.setdefault(p.vector_key, set()).add(p.slots["block"])
        assert all(len(v) == 1 for v in blocks_of_template.values())
        assert all(len(v) == 1 for v in blocks_of_vector.values())


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown preference kinds"):
        generate_grammar_pairs(catalogs()["embedded"], kinds=["cheap"])


def test_avoid_model_names_each_expert_model_and_local_only_covers_remote_models():
    cats = catalogs()
    pairs, _ = generate_grammar_pairs(cats["embedded"], kinds=["avoid_model"])
    assert {k for p in pairs for k in p.vector if k != "accuracy"} == {"models/smollm2", "models/smollm2-vote5"}
    assert {i.key: i.prefer for p in pairs for i in p.intents if i.key != "accuracy"} == {
        "models/smollm2": "lower", "models/smollm2-vote5": "lower"}
    # the paper's experts are hosted (openai kind, non-local endpoints): "keep it local" avoids them all
    paper = cats["paper"]
    routed = {a for t in paper.tools if t.kind == "llm" for a in t.backend.models}
    assert set(remote_models(paper)) == routed
    (local_only, *_) = [p for p in generate_grammar_pairs(paper, kinds=["local_only"])[0]]
    assert {f"models/{a}" for a in routed} | {"calls/web_search"} <= set(local_only.vector)
    assert all(local_only.vector[f"models/{a}"] < 0 for a in routed)
