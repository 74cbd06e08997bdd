"""GRPO rollouts on llama.cpp: the live weights are exported each step, the sampled ids are what
the transformers path would sample greedily, a group's rollouts differ, and reruns repeat."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

import torch

from toolorchestra.rl.llamacpp_rollouts import LlamaCppRolloutPolicy, LlamaCppRollouts
from toolorchestra.rl.transcript import RolloutPolicy

TOOLS = [{"type": "function", "function": {
    "name": "get_member", "description": "Look up a library member.",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]


def chats(n: int) -> list[list[dict]]:
    return [[{"role": "system", "content": "You route questions to tools."},
             {"role": "user", "content": f"Who is member M-{i % 2}?"}] for i in range(n)]


@pytest.fixture
def wide(smollm2_dir: Path, tmp_path):
    """A random-weight Llama of SmolLM2's architecture, weights wide enough for varied tokens, its
    folder (config + tokenizer) and the loaded model the trainer would hold."""
    from helpers.tiny_models import tiny_llama
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    torch.manual_seed(0)
    model = tiny_llama(tokenizer)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.5)
    folder = tmp_path / "base"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer, folder


def sampled(policy, batch, **kwargs) -> list[list[int]]:
    for messages in batch:
        policy.bind(messages, TOOLS)
    policy.chat_batch(batch, max_tokens=10, **kwargs)
    return [policy.sampled(m)[-1] for m in batch]


def test_greedy_rollouts_sample_what_the_training_model_would(wide, tmp_path):
    model, tokenizer, folder = wide
    factory = LlamaCppRollouts(folder, tmp_path / "engine", weights="f32")
    fast = factory(model, tokenizer)
    assert isinstance(fast, LlamaCppRolloutPolicy) and factory.export_s[0] > 0
    reference = RolloutPolicy(model, tokenizer)
    assert sampled(fast, chats(3), temperature=0.0) == sampled(reference, chats(3), temperature=0.0)
    # A later turn is generated from the encoder's whole multi-turn context, as in the HF path.
    turns = []
    for policy in (fast, reference):
        [messages] = chats(1)
        policy.bind(messages, TOOLS)
        [reply] = policy.chat_batch([messages], max_tokens=10)
        messages += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": "And M-1?"}]
        policy.chat_batch([messages], max_tokens=10)
        turns.append(policy.sampled(messages))
    assert turns[0] == turns[1] and len(turns[0]) == 2
    factory.close()


def test_each_step_exports_the_current_weights(wide, tmp_path):
    model, tokenizer, folder = wide
    factory = LlamaCppRollouts(folder, tmp_path / "engine", weights="f32")
    before = sampled(factory(model, tokenizer), chats(2), temperature=0.0)
    with torch.no_grad():  # an optimiser step, as far as the export can tell
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.5)
    after_policy = factory(model, tokenizer)
    after = sampled(after_policy, chats(2), temperature=0.0)
    assert after != before
    assert after == sampled(RolloutPolicy(model, tokenizer), chats(2), temperature=0.0)
    assert len(factory.export_s) == 2 and sorted(p.name for p in (tmp_path / "engine").iterdir()) == ["policy.gguf"]
    factory.close()


def test_a_groups_rollouts_differ_and_a_rerun_repeats_them(wide, tmp_path):
    model, tokenizer, folder = wide
    group = [chats(1)[0] for _ in range(4)]  # one prompt, four rollouts
    first = sampled(LlamaCppRollouts(folder, tmp_path / "a", seed=3)(model, tokenizer), group, temperature=1.0)
    group = [chats(1)[0] for _ in range(4)]
    again = sampled(LlamaCppRollouts(folder, tmp_path / "b", seed=3)(model, tokenizer), group, temperature=1.0)
    assert len({tuple(s) for s in first}) > 1, "every rollout of a group sampled the same tokens"
    assert first == again
