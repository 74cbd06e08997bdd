"""verl configuration: the paper's defaults compose and pass verl's own validation, without a GPU;
broken settings are rejected by verl; the generated files load with verl's own loaders."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from toolorchestra.core.errors import ConfigError
from toolorchestra.rl.config import GRPOSettings, TrainConfig, VerlSettings
from toolorchestra.rl.verl import compose as vc
from toolorchestra.rl.verl.launch import prepare

FILES = vc.VerlFiles(Path("/data/train.parquet"), Path("/data/val.parquet"), Path("/data/tools.yaml"),
                     Path("/data/agent_loops.yaml"), Path("/ckpt"))


def test_paper_defaults_compose_and_validate():
    config = vc.compose(vc.overrides(VerlSettings(), FILES, ray_address="auto"))
    vc.validate(config)
    arr = config.actor_rollout_ref
    assert config.algorithm.adv_estimator == "grpo" and config.algorithm.norm_adv_by_std_in_grpo is False
    assert arr.model.path == "Qwen/Qwen3-8B" and arr.actor.optim.lr == 1e-6
    assert arr.rollout.n == 8 == arr.rollout.val_kwargs.n
    assert (arr.actor.clip_ratio_low, arr.actor.clip_ratio_high) == (0.2, 0.28)
    assert arr.actor.use_kl_loss and arr.actor.kl_loss_coef == 1e-4
    assert arr.rollout.multi_turn.enable and arr.rollout.multi_turn.max_assistant_turns == 30
    assert arr.rollout.name == "vllm" and arr.rollout.mode == "async"
    assert arr.rollout.agent.default_agent_loop == "orchestra_agent"
    assert config.reward.custom_reward_function.path == "pkg://toolorchestra.rl.verl.reward"
    assert config.reward.custom_reward_function.reward_kwargs == {"clip": 3.0, "min_std": 0.1}
    bands = GRPOSettings().dead_band.model_dump()
    with_bands = vc.compose(vc.overrides(VerlSettings(), FILES, dead_band=bands, ray_address="auto"))
    assert with_bands.reward.custom_reward_function.reward_kwargs.dead_band == bands
    assert "wandb" not in list(config.trainer.logger)
    assert config.ray_kwargs.ray_init.address == "auto"
    assert config.trainer.nnodes * config.trainer.n_gpus_per_node == 16


def test_verl_validation_rejects_a_batch_the_gpus_cannot_split():
    broken = VerlSettings(train_batch_size=3, rollouts_per_task=3, ppo_mini_batch_size=3)
    with pytest.raises(ConfigError, match="verl's config validation failed"):
        vc.validate(vc.compose(vc.overrides(broken, FILES)))
    with pytest.raises(ConfigError, match="verl rejected the overrides"):
        vc.compose(vc.overrides(VerlSettings(overrides=["actor_rollout_ref.no_such_key=1"]), FILES))


def test_launch_commands():
    ov = ["a=1"]
    assert vc.command(ov)[1:] == ["-m", "verl.trainer.main_ppo", "a=1"]
    job = vc.command(ov, submit="job", ray_address="http://head:8265", working_dir="/repo")
    assert job[:7] == ["ray", "job", "submit", "--address", "http://head:8265", "--working-dir", "/repo"]
    assert job[7:] == ["--", "python", "-m", "verl.trainer.main_ppo", "a=1"]


def test_prepare_writes_inputs_verl_loads(splits, answer_catalog, settings, rl_tasks, expert, tmp_path):
    from verl.tools.tool_registry import initialize_tools_from_config

    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.episodes.rows import from_verl_row
    from toolorchestra.rl.verl.tools import OrchestraTool

    config = TrainConfig.model_validate({"backend": "verl", "episode": {"max_domain_tools": 3},
                                         "data": {"max_instances": 6}})
    run = prepare(config, splits["train"], catalog=answer_catalog, catalog_path=None, domains=DomainLocator([rl_tasks]),
                  settings=settings, folder=tmp_path / "verl", llm_for=lambda alias: expert)
    tools = initialize_tools_from_config(str(run.files.tool_config))
    assert tools and all(isinstance(t, OrchestraTool) for t in tools)
    assert "answer" in {t.name for t in tools}
    loops = yaml.safe_load(run.files.agent_loops.read_text())
    assert loops[0]["name"] == "orchestra_agent" and Path(loops[0]["catalog"]).is_file()
    assert (tmp_path / "verl" / "ppo_orchestra.yaml").is_file()
    assert run.command[1:3] == ["-m", "verl.trainer.main_ppo"]
    import pyarrow.parquet as pq

    rows = pq.read_table(run.files.train).to_pylist()
    assert len(rows) == 6 and {r["agent_name"] for r in rows} == {"orchestra_agent"}
    by_id = {i.id: i for i in splits["train"]}
    for row in rows:
        decoded = from_verl_row(row)
        original = by_id[decoded.id]
        assert decoded.prompt == original.prompt and decoded.task == original.task
        assert set(row["extra_info"]["tool_selection"]) <= set(original.domain_tools) | set(original.catalog_tools)


def test_rows_load_with_verls_dataset(splits, answer_catalog, settings, rl_tasks, expert, tmp_path, tiny_llm):
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from toolorchestra.episodes.instance import DomainLocator

    config = TrainConfig.model_validate({"backend": "verl", "data": {"max_instances": 4}})
    run = prepare(config, splits["train"], catalog=answer_catalog, catalog_path=None, domains=DomainLocator([rl_tasks]),
                  settings=settings, folder=tmp_path / "verl", llm_for=lambda alias: expert)
    data_config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 8192, "filter_overlong_prompts": False,
                                    "return_raw_chat": True, "truncation": "error"})
    dataset = RLHFDataset(data_files=[str(run.files.train)], tokenizer=tiny_llm.tokenizer, config=data_config)
    item = dataset[0]
    assert item["agent_name"] == "orchestra_agent" and item["raw_prompt"][0]["role"] == "system"
