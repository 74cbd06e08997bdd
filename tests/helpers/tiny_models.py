"""Random-weight models of SmolLM2's architecture (Llama) for fast tests of the real code paths."""

from __future__ import annotations

from typing import Any


def tiny_llama(tokenizer: Any, *, max_position_embeddings: int = 2048) -> Any:
    """A seeded two-layer Llama with `tokenizer`'s vocabulary and special tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_position_embeddings,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)
