"""Instances read back from the verl rows (datasets folder, parquet, JSONL) equal the assembled ones."""

from __future__ import annotations

import json

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.instance import DomainLocator
from toolorchestra.episodes.pool import load_pool
from toolorchestra.episodes.rows import load_instances, to_table, write_hf_dataset, write_verl_parquet
from toolorchestra.preferences.assemble import AssemblyConfig, assemble
from toolorchestra.preferences.pairs import Intent, PreferencePair

CHEAP = PreferencePair(id="cost-1", instruction="Keep the cost as low as you can.", vector={"accuracy": 1.0, "cost": 0.5},
                       kind="cost", template="t-cost", intents=[Intent(key="cost", prefer="lower")])


@pytest.fixture(scope="module")
def assembled(rl_tasks, answer_catalog):
    pool = load_pool(rl_tasks)
    return assemble(pool, answer_catalog, [CHEAP], [CHEAP],
                    AssemblyConfig(p_no_preference=0.5, include_policy=False, eval_task_fraction=0.2, seed=1))


def test_exports_load_back_as_the_assembled_instances(assembled, tmp_path):
    expected = assembled["train"]
    assert any(i.preference for i in expected) and any(i.preference is None for i in expected)
    assert {i.kind for i in expected} == {"qa", "tool_use"}
    folder = write_hf_dataset(assembled, tmp_path / "trl")
    parquet = write_verl_parquet(assembled["train"], tmp_path / "train.parquet")
    jsonl = tmp_path / "train.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in to_table(assembled["train"]).to_pylist()))
    for path in (folder, parquet, jsonl):
        loaded = load_instances(path, split="train")
        assert [i.model_dump() for i in loaded] == [i.model_dump() for i in expected], path
    assert len(load_instances(folder, split="eval")) == len(assembled["eval"])
    with pytest.raises(ConfigError, match="no split 'test'"):
        load_instances(folder, split="test")


def test_the_preferences_stage_export_folder_loads_from_its_hf_folder(assembled, tmp_path):
    write_hf_dataset(assembled, tmp_path / "datasets" / "hf")  # the stage's layout: hf/, verl/, manifest.json
    assert [i.id for i in load_instances(tmp_path / "datasets")] == [i.id for i in assembled["train"]]
    (tmp_path / "broken").mkdir()
    with pytest.raises(ConfigError, match="not a training set"):
        load_instances(tmp_path / "broken")


def test_instance_views(assembled):
    tool_use = next(i for i in assembled["train"] if i.kind == "tool_use")
    assert tool_use.required_tools and set(tool_use.required_tools) <= set(tool_use.domain_tools)
    assert tool_use.question == tool_use.prompt[-1]["content"]
    qa = next(i for i in assembled["train"] if i.kind == "qa")
    assert qa.question == qa.task["question"] and qa.answer == qa.task["answer"] and qa.required_tools == []
    with pytest.raises(ValueError, match="QA instance"):
        _ = qa.tau2_task


def test_broken_inputs_name_the_file(tmp_path):
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"prompt": []}\n')
    with pytest.raises(ConfigError, match=r"rows.jsonl\[0\].*not a training-instance row"):
        load_instances(bad)
    bad.write_text("{nope\n")
    with pytest.raises(ConfigError, match="line 1: not JSON"):
        load_instances(bad)
    with pytest.raises(ConfigError, match="run the preferences stage"):
        load_instances(tmp_path / "missing")


def test_domain_locator(rl_tasks):
    locator = DomainLocator([rl_tasks])
    assert locator.folder("library") == rl_tasks / "toolscale" / "library"
    assert locator.domain("library") is locator.domain("library")  # loaded once
    with pytest.raises(ConfigError, match="domain 'atlantis' not found"):
        locator.folder("atlantis")
