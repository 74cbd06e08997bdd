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
