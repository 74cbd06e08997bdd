"""Stage `train` through the stage runner (MLflow on a temporary SQLite), and `orchestra train`."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings

CATALOG = {
    "policy": "smollm2",
    "models": {"smollm2": {"backend": {"kind": "local"}, "price": {"input_per_mtok": 0.02, "output_per_mtok": 0.02}}},
    "tools": [],
}


@pytest.fixture(scope="module")
def tiny_folder(tiny_llm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    tiny_llm.lm.save_pretrained(folder)
    tiny_llm.tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def workspace(tmp_path, tiny_folder):
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.synthesis.procedural import ProceduralConfig

    result = synthesize_domain(load_embedded("library", seed=0, size=20), tasks=6, seed=0, qa=2, evolve_fraction=0.0,
                               config=ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0))
    write_domain_folder(tmp_path / "data/validated/toolscale/library", result,
                        qa_file=tmp_path / "data/validated/qa/library.jsonl")
    (tmp_path / "data/catalog").mkdir(parents=True)
    (tmp_path / "data/catalog/tools.json").write_text(json.dumps(CATALOG))
    section = {
        "deps": {"tasks": "data/validated", "catalog": "data/catalog/tools.json"},
        "outs": {"model": "models/orchestrator"},
        "base_model": str(tiny_folder), "device": "cpu",
        "data": {"kinds": ["tool_use"], "max_instances": 2, "assembly": {"include_policy": False}},
        "episode": {"max_turns": 2, "max_tokens": 8, "max_domain_tools": 3},
        "sft": {"steps": 1, "batch_size": 2, "max_examples": 2},
        "grpo": {"steps": 1, "num_generations": 2, "max_completion_length": 256},
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 3}, "train": section}))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"],
                   cwd=tmp_path, check=True)
    return tmp_path


def test_stage_trains_exports_and_tracks_per_step(workspace):
    import mlflow

    settings = Settings(workspace=workspace)
    metrics = run_stage("train", params_file=workspace / "params.yaml", settings=settings)
    folder = workspace / "models/orchestrator"
    assert (folder / "model.safetensors").is_file() and (folder / "orchestrator.json").is_file()
    assert metrics["grpo/global_step"] == 1.0 and metrics["instances"] == 2.0 and metrics["sft/examples"] >= 1
    assert not list((workspace / "models").glob(".orchestrator.staging-*"))
    mlflow.set_tracking_uri(settings.tracking_uri)
    [run] = mlflow.search_runs(search_all_experiments=True, output_format="list")
    client = mlflow.MlflowClient()
    for key in ("grpo/loss", "grpo/orchestra/reward_mean", "grpo/orchestra/accuracy", "grpo/orchestra/cost_mean",
                "grpo/orchestra/latency_mean", "grpo/orchestra/format_valid_rate", "grpo/orchestra/groups_filtered",
                "grpo/orchestra/frac_reward_zero_std", "grpo/tokens_per_s", "sft/loss"):
        history = client.get_metric_history(run.info.run_id, key)
        assert history and history[0].step >= 1, key
    assert run.data.params["grpo.num_generations"] == "2" and run.data.params["seed"] == "3"
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "orchestrator")]
    assert "orchestrator/model.safetensors" in artifacts and "orchestrator/catalog.json" in artifacts


def test_params_are_validated_before_anything_runs(workspace):
    params = yaml.safe_load((workspace / "params.yaml").read_text())
    del params["train"]["deps"]["tasks"]
    params["train"]["grpo"]["stepz"] = 2
    (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=r"deps.tasks|stepz"):
        run_stage("train", params_file=workspace / "params.yaml", settings=Settings(workspace=workspace), track=False)


def cli(args):
    from orchestra_cli.main import main

    return main(args)


def test_cli_dry_runs(workspace, capsys):
    params = str(workspace / "params.yaml")
    assert cli(["train", "--dry-run", "--steps", "5", "--params", params]) == 0
    out = capsys.readouterr().out
    assert "backend: trl on cpu" in out and "GRPO: 5 steps" in out and "instances: 2" in out
    assert not (workspace / "models").exists()  # a dry run trains nothing
    assert cli(["train", "--backend", "verl", "--dry-run", "--params", params]) == 0
    out = capsys.readouterr().out
    assert "verl configuration valid" in out and "verl.trainer.main_ppo" in out
    assert "algorithm.adv_estimator=grpo" in out and "actor_rollout_ref.rollout.agent.default_agent_loop=orchestra_agent" in out
    assert cli(["train", "--backend", "nope", "--dry-run", "--params", params]) == 2


def test_cli_overrides_go_to_the_backend_they_belong_to(workspace):
    from orchestra_cli.train import _section

    params = workspace / "params.yaml"
    _, trl = _section(params, None, 7)
    assert trl["grpo"]["steps"] == 7 and trl["grpo"]["num_generations"] == 2  # the rest of the section is kept
    _, verl = _section(params, "verl", 9)
    assert verl["backend"] == "verl" and verl["verl"] == {"total_training_steps": 9} and verl["grpo"]["steps"] == 1
