"""The real SmolLM2-135M through the whole TRL path (slow: minutes on two CPU cores)."""

from __future__ import annotations

import pytest

from toolorchestra.episodes.instance import DomainLocator
from toolorchestra.rl.config import TrainConfig
from toolorchestra.rl.train import train_trl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # ~5-15 min on two shared cores


def test_warm_start_and_grpo_on_the_real_model(smollm2_dir, splits, answer_catalog, settings, rl_tasks, expert, tmp_path):
    config = TrainConfig.model_validate({
        "base_model": str(smollm2_dir), "device": "cpu", "seed": 0,
        "data": {"kinds": ["tool_use"], "max_instances": 2},
        "episode": {"max_turns": 2, "max_tokens": 40, "max_domain_tools": 2, "max_observation_chars": 300},
        "sft": {"steps": 3, "batch_size": 2, "learning_rate": 1e-4, "max_examples": 4},
        "grpo": {"steps": 1, "num_generations": 2, "max_completion_length": 512},
    })
    result = train_trl(config, splits["train"], catalog=answer_catalog, settings=settings,
                       domains=DomainLocator([rl_tasks]), out_dir=tmp_path / "model", llm_for=lambda alias: expert)
    assert result.metrics["sft/final_loss"] < result.metrics["sft/first_loss"]
    step = next(row for row in result.history if "orchestra/format_valid_rate" in row)
    # After the warm start the 135M model writes calls the loop can parse and execute.
    assert step["orchestra/calls/domain"] > 0
    assert (tmp_path / "model" / "model.safetensors").is_file()
