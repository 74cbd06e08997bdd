"""Exports: verl parquet loaded by verl's own RLHFDataset with the real SmolLM2 tokenizer, and the
HF datasets folder loaded with `datasets.load_from_disk`."""

from __future__ import annotations

import json

import pytest

from toolorchestra.episodes.pool import load_pool
from toolorchestra.episodes.rows import (
    decode_extra_info,
    decode_ground_truth,
    to_table,
    write_hf_dataset,
    write_verl_parquet,
)
from toolorchestra.preferences.assemble import AssemblyConfig, assemble
from toolorchestra.preferences.grammar import generate_grammar_pairs
from toolorchestra.preferences.split import SplitConfig, split_pairs


@pytest.fixture
def instances(expert_catalog, validated):
    pairs, _ = generate_grammar_pairs(expert_catalog)
    train, evaluation = split_pairs(pairs, SplitConfig())
    return assemble(load_pool(validated), expert_catalog, train, evaluation,
                    AssemblyConfig(instances_per_task=2, eval_task_fraction=0.25, p_no_preference=0.3))


def test_rows_have_one_schema_and_decode(instances):
    table = to_table(instances["train"])
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"]
    rows = table.to_pylist()
    assert {r["agent_name"] for r in rows} == {"tool_agent"}
    assert any(r["extra_info"]["preference"] is None for r in rows)
    for row, inst in zip(rows, instances["train"], strict=True):
        extra = decode_extra_info(row["extra_info"])
        assert extra["preference_vector"] == (inst.preference.vector if inst.preference else None)
        assert extra["tool_prices"] == {k: v.model_dump() for k, v in inst.tool_prices.items()}
        assert extra["tool_selection"] == inst.tools and set(extra["tools_kwargs"]) == set(inst.tools)
        assert extra["task"] == inst.task
        truth = decode_ground_truth(row["reward_model"])
        assert row["reward_model"]["style"] == "rule" and truth["task_id"] == inst.task_id
        if inst.kind == "qa":
            assert truth["answer"] == str(inst.task["answer"])
        else:
            assert truth["evaluation_criteria"]["actions"][0]["name"] == "get_customer_details"


def test_hf_folder_loads_with_load_from_disk(instances, tmp_path):
    import datasets

    write_hf_dataset(instances, tmp_path / "hf")
    loaded = datasets.load_from_disk(str(tmp_path / "hf"))
    assert set(loaded) == {"train", "eval"}
    assert len(loaded["train"]) == len(instances["train"]) and len(loaded["eval"]) == len(instances["eval"])
    first = loaded["train"][0]
    assert first["prompt"][0]["role"] == "system" and first["prompt"][1]["role"] == "user"
    assert json.loads(first["reward_model"]["ground_truth"])["task_id"] == instances["train"][0].task_id


def test_verl_parquet_loads_with_verls_rlhf_dataset(instances, tmp_path, smollm2_dir):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = write_verl_parquet(instances["train"], tmp_path / "verl" / "train.parquet")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "cache")})
    dataset = RLHFDataset(str(path), tokenizer, config)
    assert len(dataset) == len(instances["train"])  # nothing filtered: every prompt renders with the template
    item = dataset[0]
    assert item["agent_name"] == "tool_agent" and item["raw_prompt"][1]["role"] == "user"
    assert item["index"] == 0 and set(item["tools_kwargs"]) >= set(instances["train"][0].tools)
    assert all(v is not None for v in item["tools_kwargs"].values())
    assert item["extra_info"]["tool_selection"] == instances["train"][0].tools
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    assert list(batch["agent_name"]) == ["tool_agent"] * len(dataset)
    # a prompt longer than the limit is filtered by verl, proving it tokenized our chat messages
    short = RLHFDataset(str(path), tokenizer, OmegaConf.merge(config, {"max_prompt_length": 8}))
    assert len(short) == 0
