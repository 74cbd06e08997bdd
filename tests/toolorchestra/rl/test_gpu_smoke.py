"""GPU smoke test: the TRL path (SFT warm start, one GRPO step, export) on CUDA with the tiny
random-weight model. Marked `gpu`: tests/conftest.py skips it where CUDA is not available."""

from __future__ import annotations

import math

import pytest

from toolorchestra.episodes.instance import DomainLocator
from toolorchestra.rl.config import TrainConfig
from toolorchestra.rl.train import train_trl

pytestmark = pytest.mark.gpu


def test_warm_start_and_one_grpo_step_on_cuda(tiny_dir, splits, answer_catalog, settings, rl_tasks, expert, tmp_path):
    import torch
    from safetensors.torch import load_file

    config = TrainConfig.model_validate({
        "base_model": str(tiny_dir), "device": "cuda", "seed": 0,  # bf16 on CUDA (mixed_precision: auto)
        "data": {"kinds": ["tool_use"], "max_instances": 2},
        "episode": {"max_turns": 2, "max_tokens": 16, "max_domain_tools": 3},
        "sft": {"steps": 1, "batch_size": 2, "learning_rate": 1e-3, "max_examples": 2},
        "grpo": {"steps": 1, "num_generations": 2, "max_completion_length": 128},
    })
    torch.cuda.reset_peak_memory_stats()
    result = train_trl(config, splits["train"], catalog=answer_catalog, settings=settings,
                       domains=DomainLocator([rl_tasks]), out_dir=tmp_path / "model", llm_for=lambda alias: expert)
    assert torch.cuda.max_memory_allocated() > 0, "nothing was allocated on the GPU"
    assert result.metrics["grpo/global_step"] == 1.0
    for key in ("sft/final_loss", "grpo/loss_last"):
        assert math.isfinite(result.metrics[key]), (key, result.metrics[key])
    before = load_file(tiny_dir / "model.safetensors")
    after = load_file(tmp_path / "model" / "model.safetensors")
    changed = [n for n, t in after.items() if n in before and not torch.equal(before[n].float(), t.float())]
    assert changed, "training on CUDA left every weight as it was"
