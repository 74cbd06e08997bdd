from pathlib import Path

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.base import Usage
from toolorchestra.tools.catalog import Price, load_catalog, load_embedded_catalog

REPO = Path(__file__).resolve().parents[3]


def test_embedded_catalog_is_valid_and_local():
    cat = load_embedded_catalog()
    assert cat.policy == "smollm2"
    assert [t.name for t in cat.tools] == ["code_interpreter", "local_search", "web_search",
                                           "ask_direct", "ask_program", "ask_vote"]
    assert all(m.backend.kind == "local" for m in cat.models.values())
    # each expert fixes its one model; the vote expert has its own alias (same weights and price)
    assert {t.name: t.backend.models for t in cat.tools if t.kind == "llm"} == {
        "ask_direct": ["smollm2"], "ask_program": ["smollm2"], "ask_vote": ["smollm2-vote5"]}
    assert cat.models["smollm2-vote5"].backend == cat.models["smollm2"].backend
    assert cat.models["smollm2-vote5"].price == cat.models["smollm2"].price
    assert (cat.tool("ask_vote").backend.samples, cat.tool("ask_vote").backend.temperature) == (5, 0.7)
    assert cat.resolve(cat.tool("local_search").backend.documents).is_dir()


def test_paper_catalog_has_the_papers_prices():
    cat = load_catalog(REPO / "infra" / "catalogs" / "paper.yaml")
    expected = {
        "gpt-5": (1.25, 10), "gpt-5-mini": (0.25, 2), "qwen3-32b": (0.8, 0.8), "qwen2.5-coder-32b": (0.8, 0.8),
        "qwen2.5-math-72b": (0.9, 0.9), "qwen2.5-math-7b": (0.2, 0.2), "llama-3.3-70b": (0.9, 0.9),
        "orchestrator": (0.2, 0.2),
    }
    assert {k: (m.price.input_per_mtok, m.price.output_per_mtok) for k, m in cat.models.items()} == expected
    assert cat.models["orchestrator"].backend.model == "Qwen/Qwen3-8B"
    for name in ("search", "enhance_reasoning", "answer"):
        assert cat.tool(name).backend.type == "expert"
    # keys are referenced by variable name, never stored
    assert all(m.backend.api_key_env for m in cat.models.values())


def test_a_greedy_vote_with_several_samples_is_rejected():
    from toolorchestra.tools.catalog import parse_catalog

    data = {"models": {"m": {}}, "tools": [
        {"name": "v", "kind": "llm", "backend": {"type": "expert", "role": "vote", "models": ["m"], "temperature": 0}}]}
    with pytest.raises(ConfigError, match="temperature > 0"):
        parse_catalog(data, source="t")
    data["tools"][0]["backend"]["samples"] = 1  # one greedy sample is a plain answer: allowed
    assert parse_catalog(data, source="t").tool("v").backend.samples_per_call == 1


def test_price_of_tokens_is_per_million():
    price = Price(input_per_mtok=1.25, output_per_mtok=10.0)
    assert price.tokens_cost(Usage(prompt_tokens=1_000_000, completion_tokens=100_000)) == pytest.approx(2.25)


def test_reused_prompt_tokens_cost_the_cached_input_price_and_no_more_than_the_prompt_holds():
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=100_000)
    price = Price(input_per_mtok=1.25, cached_input_per_mtok=0.125, output_per_mtok=10.0)
    assert price.tokens_cost(usage, reused_prompt_tokens=600_000) == pytest.approx(0.5 + 0.075 + 1.0)
    assert price.tokens_cost(usage, reused_prompt_tokens=5_000_000) == pytest.approx(0.125 + 1.0)  # capped
    assert price.tokens_cost(usage) == pytest.approx(2.25)  # nothing reused: the input price
    # no cached price stated: reused tokens cost the input price (catalogs written before it)
    assert Price(input_per_mtok=1.25, output_per_mtok=10.0).tokens_cost(usage, 600_000) == pytest.approx(2.25)
    with pytest.raises(ValueError, match="cannot exceed input_per_mtok"):
        Price(input_per_mtok=0.1, cached_input_per_mtok=0.2)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("models: [unclosed", "invalid YAML at line 1"),
        ("- just a list", "must be a mapping"),
        ("tools:\n  - name: x\n    kind: code\n", "tools.0.backend: Field required"),
        ("tools:\n  - name: x\n    kind: magic\n    backend: {type: code_interpreter}\n", "tools.0.kind: Input should be"),
        ("tools:\n  - {name: x, kind: code, backend: {type: code_interpreter}}\n  - {name: x, kind: code, backend: {type: code_interpreter}}\n", "duplicate tool names ['x']"),
        ("tools:\n  - {name: a, kind: llm, backend: {type: expert, role: answer, models: [ghost]}}\n", "unknown models ['ghost']"),
        ("models: {m: {price: {input_per_mtok: -1}}}\n", "models.m.price.input_per_mtok: Input should be greater than or equal to 0"),
        ("policy: nobody\n", "policy 'nobody' is not a model alias"),
        ("tools:\n  - {name: x, kind: code, backend: {type: code_interpreter, surprise: 1}}\n", "Extra inputs are not permitted"),
    ],
)
def test_broken_catalogs_name_the_file_key_and_reason(tmp_path, text, needle):
    path = tmp_path / "cat.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_catalog(path)
    message = str(info.value)
    assert str(path) in message and needle in message and "\n" not in message


def test_missing_catalog_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read catalog"):
        load_catalog(tmp_path / "nope.yaml")


def test_with_search_corpus_points_local_search_at_a_folder(tmp_path):
    cat = load_embedded_catalog()
    moved = cat.with_search_corpus(tmp_path / "docs")
    assert moved.resolve(moved.tool("local_search").backend.documents) == tmp_path / "docs"
    assert moved.tool("code_interpreter") == cat.tool("code_interpreter")
    assert cat.resolve(cat.tool("local_search").backend.documents).name == "corpus"  # original untouched
