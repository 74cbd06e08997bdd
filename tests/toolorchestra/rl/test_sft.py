"""SFT warm start: golden trajectories encoded like rollouts; SFTTrainer learns them."""

from __future__ import annotations

import pytest
import torch

from toolorchestra.rl.config import SFTSettings
from toolorchestra.rl.sft import golden_examples, run_sft
from toolorchestra.rl.transcript import TranscriptEncoder


def test_golden_examples_train_only_the_policys_turns(make_env, splits, tiny_llm):
    tokenizer = tiny_llm.tokenizer
    env = make_env(max_domain_tools=3)
    examples = golden_examples(env, splits["train"], tokenizer, SFTSettings(max_examples=3))
    assert len(examples) == 3  # QA instances have no golden trajectory and are skipped
    for example in examples:
        ids, mask = example["input_ids"], example["assistant_masks"]
        trained = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
        assert trained.count("<tool_call>") >= 1 and trained.count("<|im_end|>") == trained.count("<tool_call>") + 1
        assert "<tool_response>" not in trained and "<|im_start|>" not in trained
    too_short = golden_examples(env, splits["train"], tokenizer, SFTSettings(max_length=64))
    assert too_short == []


def test_sft_lowers_the_loss_on_golden_trajectories(make_env, splits, tiny_llm, tmp_path):
    from transformers import LlamaForCausalLM

    tokenizer = tiny_llm.tokenizer
    examples = golden_examples(make_env(max_domain_tools=3), splits["train"], tokenizer, SFTSettings(max_examples=2))
    model = LlamaForCausalLM(tiny_llm.lm.config)
    model.load_state_dict(tiny_llm.lm.state_dict())

    def loss() -> float:
        ids = torch.tensor([examples[0]["input_ids"]])
        labels = ids.clone()
        labels[0, torch.tensor(examples[0]["assistant_masks"]) == 0] = -100
        with torch.no_grad():
            return float(model(input_ids=ids, labels=labels).loss)

    before = loss()
    metrics = run_sft(model, tokenizer, examples, SFTSettings(steps=4, batch_size=2, learning_rate=1e-2), tmp_path)
    assert metrics["sft/train_loss"] > 0
    assert loss() < before - 0.5
    with pytest.raises(ValueError, match="no golden trajectories"):
        run_sft(model, tokenizer, [], SFTSettings(steps=1), tmp_path)
    assert TranscriptEncoder(tokenizer).eos_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_every_category_reaches_the_warm_start_when_examples_are_capped(make_env, splits, tiny_llm):
    """Examples are taken in turn from each stratum (`data_source`): with 20 calculations and 3
    tickets and room for 6, the 3 tickets are in. Taken from one shuffled list, as before, a rare
    category got about its share (the demo's 48 examples held 1 ticket of 8 available)."""
    from types import SimpleNamespace

    ticket = next(i for i in splits["train"] if i.kind == "tool_use")
    golden = make_env(max_domain_tools=3).golden_conversation(ticket)
    assert golden is not None

    class Env:
        def golden_conversation(self, instance):
            return None if instance.data_source == "qa/numeric" else golden

    def instance(source, n):
        return SimpleNamespace(kind="qa", domain=None, task_id=f"{source}-{n}", data_source=source, id=f"{source}-{n}")

    pool = ([instance("qa/arithmetic", n) for n in range(20)] + [instance("toolscale/shop", n) for n in range(3)]
            + [instance("qa/numeric", n) for n in range(5)])  # no golden trajectory: skipped, not counted
    picked = []

    class Recording(Env):
        def golden_conversation(self, inst):
            found = super().golden_conversation(inst)
            if found is not None:
                picked.append(inst.data_source)
            return found

    examples = golden_examples(Recording(), pool * 2, tiny_llm.tokenizer, SFTSettings(max_examples=6))
    assert len(examples) == 6  # duplicates of a task count once
    assert picked.count("toolscale/shop") == 3 and picked.count("qa/arithmetic") == 3
    everything = golden_examples(Env(), pool, tiny_llm.tokenizer, SFTSettings(max_examples=None))
    assert len(everything) == 23
