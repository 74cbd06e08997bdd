"""A whole TRL run with the tiny model: warm start, GRPO, export, and resuming an interrupted run."""

from __future__ import annotations

import json

import pytest
from transformers import TrainerCallback

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.instance import DomainLocator
from toolorchestra.rl.checkpoint import load_catalog_of, read_manifest
from toolorchestra.rl.config import TrainConfig
from toolorchestra.rl.train import select_instances, train_trl, use_bf16, work_folder


class Interrupt(TrainerCallback):
    """Kills the run at the end of `at_step`, before that step's checkpoint is written."""

    def __init__(self, at_step: int) -> None:
        self.at_step, self.seen = at_step, []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(state.global_step)
        if state.global_step == self.at_step:
            raise KeyboardInterrupt("simulated crash")


class Steps(TrainerCallback):
    def __init__(self) -> None:
        self.seen = []

    def on_step_end(self, args, state, control, **kwargs):
        self.seen.append(state.global_step)


def config(tiny_dir, **grpo):
    return TrainConfig.model_validate({
        "base_model": str(tiny_dir), "device": "cpu", "seed": 0,
        "data": {"kinds": ["tool_use"], "max_instances": 3},
        "episode": {"max_turns": 2, "max_tokens": 8, "max_domain_tools": 3},
        "sft": {"enabled": True, "steps": 1, "batch_size": 2, "max_examples": 4},
        "grpo": {"steps": 3, "num_generations": 2, "save_steps": 1, "max_completion_length": 256, **grpo},
    })


def test_an_interrupted_run_resumes_from_its_last_checkpoint(tiny_dir, splits, answer_catalog, settings, rl_tasks,
                                                             expert, tmp_path):
    cfg = config(tiny_dir)
    domains = DomainLocator([rl_tasks])
    kwargs = dict(catalog=answer_catalog, settings=settings, domains=domains, llm_for=lambda alias: expert)
    crash = Interrupt(at_step=2)
    with pytest.raises(KeyboardInterrupt):
        train_trl(cfg, splits["train"], out_dir=tmp_path / "first", callbacks=[crash], **kwargs)
    assert crash.seen == [1, 2]
    work = work_folder(cfg, select_instances(cfg, splits["train"]), answer_catalog, settings)
    assert (work / "grpo" / "checkpoint-1").is_dir() and not (work / "grpo" / "checkpoint-2").exists()
    assert (work / "sft" / "model" / ".complete").is_file()
    assert not (tmp_path / "first").exists()

    again = Steps()
    result = train_trl(cfg, splits["train"], out_dir=tmp_path / "model", callbacks=[again], **kwargs)
    assert result.resumed_from_step == 1
    assert again.seen == [2, 3]  # continued where the checkpoint left off, not from step 1
    assert result.metrics["grpo/global_step"] == 3.0
    assert "sft/final_loss" not in result.metrics  # the warm start was reused, not redone
    assert not work.exists()  # finished: the resumable state is cleaned up

    folder = result.checkpoint
    for name in ("model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja", "catalog.json",
                 "orchestrator.json"):
        assert (folder / name).is_file(), name
    manifest = read_manifest(folder)
    assert manifest["steps"]["grpo"] == 3 and manifest["backend"] == "trl"
    assert [t.name for t in load_catalog_of(folder).tools] == [t.name for t in answer_catalog.tools]
    assert "tools" in (folder / "chat_template.jinja").read_text()  # the tools-aware template


def test_a_different_configuration_does_not_resume_another_runs_state(tiny_dir, splits, answer_catalog, settings):
    instances = select_instances(config(tiny_dir), splits["train"])
    a = work_folder(config(tiny_dir), instances, answer_catalog, settings)
    assert a == work_folder(config(tiny_dir, steps=9), instances, answer_catalog, settings)  # only longer
    assert a != work_folder(config(tiny_dir, learning_rate=3e-4), instances, answer_catalog, settings)
    assert a != work_folder(config(tiny_dir), instances[:1], answer_catalog, settings)


def test_select_instances_filters_and_caps(tiny_dir, splits):
    cfg = TrainConfig.model_validate({"base_model": str(tiny_dir), "data": {"kinds": ["qa"]}, "sft": {"enabled": False}})
    assert {i.kind for i in select_instances(cfg, splits["train"])} == {"qa"}
    fewest = min(len(i.tau2_task.actions) for i in splits["train"] if i.kind == "tool_use")
    cfg = TrainConfig.model_validate({"base_model": str(tiny_dir), "data": {"max_actions": fewest, "kinds": ["tool_use"]}})
    chosen = select_instances(cfg, splits["train"])
    assert chosen and all(len(i.tau2_task.actions) <= fewest for i in chosen)
    cfg = TrainConfig.model_validate({"base_model": str(tiny_dir), "data": {"max_actions": fewest - 1 or None,
                                                                          "kinds": ["tool_use"], "max_instances": 2}})
    if fewest > 1:
        with pytest.raises(ConfigError, match="no training instances left"):
            select_instances(cfg, splits["train"])
    cfg = TrainConfig.model_validate({"base_model": str(tiny_dir), "data": {"max_instances": 2}})
    assert len(select_instances(cfg, splits["train"])) == 2


def test_config_rejects_sft_without_tool_use_and_bad_clips():
    with pytest.raises(ValueError, match="sft.enabled needs tool-use"):
        TrainConfig.model_validate({"data": {"kinds": ["qa"]}})
    with pytest.raises(ValueError, match="epsilon_high"):
        TrainConfig.model_validate({"grpo": {"epsilon": 0.3, "epsilon_high": 0.2}})
    with pytest.raises(ValueError, match="extra"):
        TrainConfig.model_validate({"grpo": {"stepz": 3}})
    assert json.loads(TrainConfig().model_dump_json())["grpo"]["num_generations"] == 4


def test_mixed_precision_choice(tiny_dir, monkeypatch):
    import torch

    def precision(value):
        return config(tiny_dir).model_copy(update={"mixed_precision": value})

    assert use_bf16(precision("no"), "cuda:0") is False
    assert use_bf16(precision("bf16"), "cpu") is True
    assert use_bf16(precision("auto"), "cuda") is True
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert use_bf16(precision("auto"), "cpu") is False  # no native bf16: autocast would be slower
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert use_bf16(precision("auto"), "cpu") is True
