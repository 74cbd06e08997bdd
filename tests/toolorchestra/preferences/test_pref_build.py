"""The preferences pipeline phases end to end, including its gates."""

from __future__ import annotations

import json

import pytest
from helpers.pref_fixtures import GOOD, KeywordVerifier, Scripted

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.pool import load_pool
from toolorchestra.episodes.reward import group_rewards
from toolorchestra.preferences.build import (
    DirectionError,
    GeneratorConfig,
    PreferencesConfig,
    build_preferences,
    write_outputs,
)
from toolorchestra.preferences.expectations import PreferenceSuiteError
from toolorchestra.preferences.pairs import load_pairs


def test_build_and_write(expert_catalog, validated, tmp_path):
    build = build_preferences(expert_catalog, load_pool(validated), PreferencesConfig())
    write_outputs(build, tmp_path / "prefs", tmp_path / "data")
    train, evaluation = load_pairs(tmp_path / "prefs/train.jsonl"), load_pairs(tmp_path / "prefs/eval.jsonl")
    assert train == build.train and evaluation == build.eval
    report = json.loads((tmp_path / "prefs/report.json").read_text())
    assert report["heldout_kinds_in_eval_only"] == ["cost_latency", "local_only"] and report["suite"]["success"]
    assert (tmp_path / "data/verl/train.parquet").is_file() and (tmp_path / "data/verl/eval.parquet").is_file()
    manifest = json.loads((tmp_path / "data/manifest.json").read_text())
    assert manifest["splits"] == {"train": len(build.instances["train"]), "eval": len(build.instances["eval"])}
    metrics = build.metrics()
    assert metrics["kinds_eval_only"] == 2 and metrics["pairs_total"] == metrics["pairs_train"] + metrics["pairs_eval"]


def test_a_reward_that_disagrees_stops_the_build(expert_catalog, validated, monkeypatch):
    from toolorchestra.preferences import pairs

    def flipped(metrics, correct, preference):  # the released code's sign: dearer rollouts score higher
        return group_rewards(metrics, correct, {k: (-v if k in ("cost", "latency") else v) for k, v in preference.items()})

    monkeypatch.setattr(pairs, "group_rewards", flipped)
    with pytest.raises(DirectionError, match="cost lower should win"):
        build_preferences(expert_catalog, load_pool(validated), PreferencesConfig())


def test_llm_pairs_join_grammar_pairs(expert_catalog, validated):
    from toolorchestra.preferences.grammar import generate_grammar_pairs

    taken = next(p for p in generate_grammar_pairs(expert_catalog)[0] if p.kind == "avoid_tool")
    repeat = {"instruction": taken.instruction.upper(), "vector": taken.vector}  # same text, other case
    proposer = Scripted([json.dumps([*GOOD, repeat])])
    config = PreferencesConfig(generator=GeneratorConfig(source="both"))
    build = build_preferences(expert_catalog, load_pool(validated), config,
                              proposer=proposer, verifier=KeywordVerifier())
    assert build.report()["sources"]["llm"] == 2 and build.llm_duplicates_of_grammar == 1
    assert build.propose_stats.accepted == 3
    with pytest.raises(ConfigError, match="needs a proposer and a verifier"):
        build_preferences(expert_catalog, load_pool(validated), config)


def test_suite_failure_stops_the_build(expert_catalog, validated, monkeypatch):
    import toolorchestra.preferences.build as build_module

    real = build_module.generate_pairs

    def with_duplicate(*args, **kwargs):
        rows, notes, stats, dropped = real(*args, **kwargs)
        return [*rows, {**rows[0], "id": "copy"}], notes, stats, dropped

    monkeypatch.setattr(build_module, "generate_pairs", with_duplicate)
    with pytest.raises(PreferenceSuiteError, match="instruction_norm: expect_column_values_to_be_unique"):
        build_preferences(expert_catalog, load_pool(validated), PreferencesConfig())
