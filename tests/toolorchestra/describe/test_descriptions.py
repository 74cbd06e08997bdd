"""Descriptions from measured behaviour: real toolbox, experts, agent loop and judges, with two
test-double models of different quality."""

from __future__ import annotations

import re

import pytest
from helpers.pref_fixtures import ConstantExpert, SmartExpert, expert_catalog_data

from toolorchestra.core.settings import Settings
from toolorchestra.describe.descriptions import (
    MARKER,
    apply_measurement,
    base_description,
    describe_catalog,
    format_usd,
    relocated_dict,
)
from toolorchestra.describe.measure import DescribeConfig, Measurement, measure
from toolorchestra.episodes.pool import load_pool
from toolorchestra.llm.base import LLMError
from toolorchestra.tools.catalog import load_embedded_catalog, parse_catalog


def _describe(catalog, pool, tmp_path, doubles, **config):
    settings = Settings(workspace=tmp_path)
    cfg = DescribeConfig(samples_per_category=4, max_workers=2, **config)
    return describe_catalog(catalog, pool, settings, cfg, llm_for=doubles.__getitem__)


def counts(catalog):
    """n and correct per model and category of the `answer` tool's stats."""
    return {a: {c: (x["n"], x["correct"]) for c, x in cats.items()}
            for a, cats in catalog.tool("answer").stats["models"].items()}


@pytest.fixture
def measured(expert_catalog, validated, tmp_path):
    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    return _describe(expert_catalog, load_pool(validated), tmp_path, doubles)


def test_better_model_gets_better_stats_and_descriptions_state_them(measured):
    catalog, measurement = measured
    answer = catalog.tool("answer")
    stats = answer.stats["models"]
    assert stats["smart"]["qa_numeric"]["accuracy"] == 1.0
    assert stats["constant"]["qa_numeric"]["accuracy"] == 0.25  # "42" is right for one question
    assert stats["smart"]["tool_use"]["accuracy"] == 1.0 and stats["constant"]["tool_use"]["accuracy"] == 0.0
    assert stats["smart"]["qa_lookup"]["correct"] == 3  # knows three of four facts
    # every figure in the stats appears in the description
    for alias, categories in stats.items():
        for category, s in categories.items():
            assert f"{s['correct']}/{s['n']} ({round(100 * s['accuracy'])}%)" in answer.description
            assert format_usd(s["mean_cost_usd"]) in answer.description
    assert answer.description.startswith("Ask an expert for the final answer. " + MARKER)
    assert "model smart: QA numeric: 4/4 (100%) correct" in answer.description
    assert "tool use: 0/4 (0%) solved as the agent" in answer.description
    # cost is priced from the catalog: smart is 10-40x dearer per token than constant
    assert stats["smart"]["qa_numeric"]["mean_cost_usd"] > 5 * stats["constant"]["qa_numeric"]["mean_cost_usd"]
    assert all(s["mean_latency_s"] > 0 for cats in stats.values() for s in cats.values())
    # non-LLM tools keep their descriptions and get no stats
    assert catalog.tool("web_search").description == "Search the web." and catalog.tool("web_search").stats == {}
    assert "tool use: 4/4 (100%) solved" in catalog.models["smart"].description
    assert len(measurement.records) == 2 * 2 * 2 * 4 + 2 * 4  # tools x models x QA categories x n + agent runs


def test_reasoning_tool_is_judged_on_what_the_program_printed(measured):
    catalog, measurement = measured
    rows = [r for r in measurement.records if r.tool == "enhance_reasoning" and r.model == "smart"
            and r.category == "qa_numeric"]
    assert all(r.correct for r in rows) and {r.output for r in rows} == {"391", "42", "99", "84"}
    assert catalog.tool("enhance_reasoning").stats["models"]["smart"]["qa_lookup"]["accuracy"] == 0.0


def test_description_changes_when_the_tool_behaviour_changes(expert_catalog, validated, tmp_path):
    pool = load_pool(validated)
    good, _ = _describe(expert_catalog, pool, tmp_path, {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")})
    # the same alias now backed by a model that always says 42
    bad, _ = _describe(expert_catalog, pool, tmp_path, {"smart": ConstantExpert("smart"), "constant": ConstantExpert("constant")})
    assert good.tool("answer").description != bad.tool("answer").description
    assert "model smart: QA numeric: 4/4 (100%)" in good.tool("answer").description
    assert "model smart: QA numeric: 1/4 (25%)" in bad.tool("answer").description


def test_redescribing_starts_from_the_original_text(measured, validated, tmp_path):
    catalog, _ = measured
    again, _ = _describe(catalog, load_pool(validated), tmp_path,
                         {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")})
    text = again.tool("answer").description
    assert text.count(MARKER) == 1 and base_description(text) == "Ask an expert for the final answer."
    assert again.models["smart"].description.count(MARKER) == 1


def test_category_and_tool_selection(expert_catalog, validated, tmp_path):
    catalog, m = _describe(expert_catalog, load_pool(validated), tmp_path,
                           {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")},
                           tools=["answer"], categories=["qa_lookup"])
    assert set(m.stats) == {"answer"} and set(m.stats["answer"]["smart"]) == {"qa_lookup"}
    assert "QA numeric" not in catalog.tool("answer").description
    assert catalog.tool("enhance_reasoning").stats == {}
    with pytest.raises(ValueError, match="not LLM tools"):
        _describe(expert_catalog, load_pool(validated), tmp_path, {}, tools=["web_search"])


class Summarizer(SmartExpert):
    def reply(self, messages):
        shown = messages[-1]["content"]
        right, wrong = shown.count("result: right"), shown.count("result: wrong")
        return f"Right on {right} shown tasks, wrong on {wrong}; fails on questions it has no facts for."


class Failing(SmartExpert):
    def chat(self, *args, **kwargs):
        raise LLMError("endpoint down")


def test_summaries_from_trajectories_are_appended(expert_catalog, validated, tmp_path):
    settings = Settings(workspace=tmp_path)
    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    cfg = DescribeConfig(samples_per_category=2, categories=["qa_numeric", "qa_lookup"], summary_examples=4)
    catalog, m = describe_catalog(expert_catalog, load_pool(validated), settings, cfg,
                                  llm_for=doubles.__getitem__, summarizer=Summarizer("sum"))
    text = catalog.tool("answer").description
    assert re.search(r"model constant: .*Observed: Right on \d shown tasks, wrong on \d", text)
    assert catalog.tool("answer").stats["summaries"]["smart"].startswith("Right on")
    _, failed = describe_catalog(expert_catalog, load_pool(validated), settings, cfg,
                                 llm_for=doubles.__getitem__, summarizer=Failing("x"))
    assert failed.summary_failures == 4 and not failed.summaries


def test_the_embedded_experts_are_measured_per_category_with_n(validated, tmp_path):
    """The three single-model experts (no `model` argument) measured with a test double behind
    both aliases; the stats carry accuracy and n per category, which `always_strongest` reads."""
    from toolorchestra.evaluation.methods import always_strongest, cascade

    smart = SmartExpert("smart")
    catalog, m = _describe(load_embedded_catalog(), load_pool(validated), tmp_path,
                           {"smollm2": smart, "smollm2-vote5": smart}, categories=["qa_numeric", "qa_lookup"])
    assert set(m.stats) == {"ask_direct", "ask_program", "ask_vote"}
    stats = {t: catalog.tool(t).stats["models"] for t in m.stats}
    assert set(stats["ask_vote"]) == {"smollm2-vote5"} and set(stats["ask_direct"]) == {"smollm2"}
    assert all(s["n"] == 4 for models in stats.values() for cats in models.values() for s in cats.values())
    direct, program, vote = (stats[t][a] for t, a in (("ask_direct", "smollm2"), ("ask_program", "smollm2"),
                                                      ("ask_vote", "smollm2-vote5")))
    assert direct["qa_numeric"]["accuracy"] == program["qa_numeric"]["accuracy"] == 1.0  # it computes
    assert program["qa_lookup"]["accuracy"] == 0.0  # no program for a fact: the task does not end, wrong
    assert direct["qa_lookup"]["correct"] == vote["qa_lookup"]["correct"] == 3  # "I do not know" once
    # the vote pays for its five samples
    assert vote["qa_numeric"]["mean_prompt_tokens"] == pytest.approx(5 * direct["qa_numeric"]["mean_prompt_tokens"])
    assert vote["qa_numeric"]["mean_cost_usd"] == pytest.approx(5 * direct["qa_numeric"]["mean_cost_usd"])
    # measured: direct and vote tie on accuracy (7/8), the pricier vote wins the tie; cheapest first for the cascade
    assert always_strongest(catalog).info["route"] == ["ask_vote:smollm2-vote5"]
    assert cascade(catalog, max_turns=3).info["route"][0] == "ask_direct:smollm2"


def test_compact_style_states_accuracy_n_and_cost_per_call_in_one_clause(expert_catalog, validated, tmp_path):
    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    full, _ = _describe(expert_catalog, load_pool(validated), tmp_path, doubles)
    compact, _ = _describe(expert_catalog, load_pool(validated), tmp_path, doubles, style="compact")
    text = compact.tool("answer").description
    assert "model smart: QA numeric 100% (n=4), QA lookup 75% (n=4), tool use 100% (n=4); $" in text
    assert "/call." in text and "tokens" not in text
    assert len(text) < len(full.tool("answer").description) / 2
    assert counts(compact) == counts(full)  # the stats keep every figure either way
    assert base_description(text) == "Ask an expert for the final answer."


def test_compact_style_leaves_out_figures_measured_on_too_few_samples_but_keeps_the_cost(
        expert_catalog, validated, tmp_path):
    """`stated_min_n`: four samples a category cannot tell the two experts apart well enough to be
    worth ~55 prompt tokens a tool on every policy turn; the cost per call is still stated and
    the stats keep every figure."""
    import doctest

    from toolorchestra.describe import descriptions

    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    stated, _ = _describe(expert_catalog, load_pool(validated), tmp_path, doubles, style="compact")
    terse, _ = _describe(expert_catalog, load_pool(validated), tmp_path, doubles, style="compact", stated_min_n=5)
    text = terse.tool("answer").description
    assert re.fullmatch(r"Ask an expert for the final answer\. Measured on sampled tasks: model smart: "
                        r"\$[0-9.]+/call\. model constant: \$[0-9.]+/call\.", text), text
    assert "%" not in text and len(text) < len(stated.tool("answer").description) / 2
    assert counts(terse) == counts(stated)  # the stats keep every figure
    assert doctest.testmod(descriptions).failed == 0


def test_aliases_of_one_agent_share_their_tool_use_episodes(validated, tmp_path):
    catalog = load_embedded_catalog()
    doubles = {"smollm2": SmartExpert("smollm2"), "smollm2-vote5": SmartExpert("vote")}
    _, m = _describe(catalog, load_pool(validated), tmp_path, doubles, categories=["tool_use"], tools=["ask_vote",
                                                                                                   "ask_direct"])
    runs = [r for r in m.records if r.category == "tool_use"]
    assert sorted(r.model for r in runs) == ["smollm2"] * 4 + ["smollm2-vote5"] * 4
    assert doubles["smollm2-vote5"].calls == 0  # same backend and price: its episodes were not run again
    assert m.stats["ask_vote"]["smollm2-vote5"]["tool_use"] == m.stats["ask_direct"]["smollm2"]["tool_use"]


def test_tool_use_episodes_are_counted_apart_from_qa_calls(validated, tmp_path):
    """An episode is several turns of long prompts, a QA call one short one: `tool_use_samples`
    sets their number apart, and the records keep the job order (QA first)."""
    settings = Settings(workspace=tmp_path)
    config = DescribeConfig(samples_per_category=3, tool_use_samples=2, max_workers=2, tools=["ask_direct"],
                            categories=["qa_numeric", "tool_use"])
    m = measure(load_embedded_catalog(), load_pool(validated), settings, config,
                llm_for=lambda alias: SmartExpert("smollm2"))
    assert [r.category for r in m.records] == ["qa_numeric"] * 3 + ["tool_use"] * 2
    stats = m.stats["ask_direct"]["smollm2"]
    assert stats["qa_numeric"].n == 3 and stats["tool_use"].n == 2 and stats["tool_use"].accuracy == 1.0


def test_relocated_catalog_keeps_its_search_corpus(tmp_path):
    catalog = load_embedded_catalog()
    out_dir = tmp_path / "data" / "catalog"
    data = relocated_dict(catalog, out_dir)
    moved = parse_catalog(data, source="x", base_dir=out_dir)
    original = catalog.resolve(catalog.tool("local_search").backend.documents)
    assert moved.resolve(moved.tool("local_search").backend.documents).resolve() == original.resolve()


def test_format_usd():
    assert format_usd(6.24e-06) == "$0.0000062"
    assert format_usd(0.5) == "$0.50" and format_usd(12.345) == "$12.35" and format_usd(0) == "$0"


def test_apply_measurement_without_measurements_changes_nothing(expert_catalog):
    same = apply_measurement(expert_catalog, Measurement(), DescribeConfig())
    assert same.to_dict() == expert_catalog.to_dict()


def test_catalog_test_data_is_valid():
    parse_catalog(expert_catalog_data(("smart",)), source="x")


@pytest.mark.slow
def test_real_smollm2_expert_is_measured(smollm2_dir, validated, tmp_path):
    """The embedded catalog's real local expert on a tiny sample: genuine figures, whatever they are."""
    catalog = load_embedded_catalog()
    settings = Settings(workspace=tmp_path, state_dir=smollm2_dir.parents[1])
    cfg = DescribeConfig(samples_per_category=1, categories=["qa_numeric", "tool_use"],
                         max_turns=2, max_tokens=48, max_workers=1)
    described, m = describe_catalog(catalog, load_pool(validated), settings, cfg)
    assert set(m.stats) == {"ask_direct", "ask_program", "ask_vote"}
    stats = described.tool("ask_direct").stats["models"]["smollm2"]
    assert set(stats) == {"qa_numeric", "tool_use"}
    assert stats["qa_numeric"]["n"] == 1 and stats["qa_numeric"]["mean_completion_tokens"] > 0
    assert stats["qa_numeric"]["mean_cost_usd"] > 0 and stats["tool_use"]["mean_latency_s"] > 0
    assert "model smollm2: QA numeric: " in described.tool("ask_direct").description
    vote = described.tool("ask_vote").stats["models"]["smollm2-vote5"]["qa_numeric"]
    assert vote["mean_prompt_tokens"] > 4 * stats["qa_numeric"]["mean_prompt_tokens"]  # five real samples
