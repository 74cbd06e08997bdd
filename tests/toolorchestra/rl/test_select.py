"""The run's checkpoint choice: GRPO's policy unless it solved fewer validation tasks than its warm
start, the warm start's weights exported when it did, and the choice in the manifest."""

from __future__ import annotations

import pytest
from safetensors.torch import load_file

from toolorchestra.core.checksum import weights_sha256
from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
from toolorchestra.episodes.instance import DomainLocator
from toolorchestra.rl.checkpoint import read_manifest
from toolorchestra.rl.config import SelectSettings, TrainConfig
from toolorchestra.rl.select import choose
from toolorchestra.rl.train import served_environment, train_trl, validation_instances


def test_grpo_is_kept_unless_it_solves_fewer():
    settings = SelectSettings()
    tie = choose([True, False, True], [False, True, True], settings)
    assert tie.chosen == "grpo" and (tie.grpo_only, tie.warm_start_only) == (1, 1)
    worse = choose([True, True, False], [True, False, False], settings)
    assert worse.chosen == "warm_start" and worse.warm_start_solved == 2 and worse.grpo_solved == 1
    assert "fewer than the warm start's 2/3" in worse.reason
    assert choose([True, True, False], [True, False, False], SelectSettings(max_drop=1)).chosen == "grpo"
    better = choose([False, False], [True, False], settings)
    assert better.chosen == "grpo" and better.metrics()["select/chose_grpo"] == 1.0
    with pytest.raises(ValueError, match="different task lists"):
        choose([True], [True, False], settings)


def test_the_validation_sample_is_seeded(splits):
    pool = splits["train"]
    assert validation_instances(TrainConfig(), pool) == pool
    capped = TrainConfig.model_validate({"select": {"max_instances": 2}})
    a = validation_instances(capped, pool)
    assert len(a) == 2 and a == validation_instances(capped, pool)


def run_config(tiny_dir):
    return TrainConfig.model_validate({
        "base_model": str(tiny_dir), "device": "cpu", "seed": 0,
        "data": {"kinds": ["tool_use"], "max_instances": 3},
        "episode": {"max_turns": 2, "max_tokens": 8, "max_domain_tools": 3},
        "sft": {"enabled": True, "steps": 1, "batch_size": 2, "max_examples": 4},
        "grpo": {"steps": 1, "num_generations": 2, "max_completion_length": 128, "rollout_engine": "transformers"},
    })


@pytest.fixture
def run(tiny_dir, splits, answer_catalog, settings, rl_tasks, expert, tmp_path):
    validation = [i for i in splits["eval"] if i.kind == "tool_use"]
    assert validation

    def train(**kwargs):
        return train_trl(run_config(tiny_dir), splits["train"], catalog=answer_catalog, settings=settings,
                         domains=DomainLocator([rl_tasks]), llm_for=lambda alias: expert, out_dir=tmp_path / "model",
                         warm_start_dir=tmp_path / "warm", **kwargs)
    return train, validation, tmp_path


def test_a_run_runs_both_policies_on_the_validation_split_and_records_the_choice(run):
    train, validation, _ = run
    result = train(validation=validation)
    manifest = read_manifest(result.checkpoint)
    selection = manifest["selection"]
    assert selection["n"] == len(validation) == result.metrics["select/n"]
    assert selection["chosen"] in ("grpo", "warm_start") and selection["reason"]
    assert 0 <= selection["grpo_solved"] <= selection["n"] and result.metrics["select/seconds"] > 0


def test_a_run_whose_grpo_policy_does_worse_exports_the_warm_start(run, monkeypatch):
    import toolorchestra.rl.select as select

    train, validation, tmp = run
    monkeypatch.setattr(select, "solved", lambda env, model, tok, instances, **kw: [kw["name"] == "warm_start"] * len(instances))
    result = train(validation=validation)
    manifest = read_manifest(result.checkpoint)
    assert manifest["selection"]["chosen"] == "warm_start" and result.metrics["select/chose_grpo"] == 0.0
    assert manifest["steps"]["grpo"] == 0 and manifest["steps"]["grpo_run"] == 1
    exported, warm = load_file(tmp / "model" / "model.safetensors"), load_file(tmp / "warm" / "model.safetensors")
    assert exported.keys() == warm.keys() and all((exported[k] == warm[k]).all() for k in warm)
    # byte for byte: the evaluate stage recognises the warm start as the candidate by its weights hash
    assert weights_sha256(tmp / "model") == weights_sha256(tmp / "warm")


def test_without_validation_instances_grpos_policy_is_exported_unchecked(run, caplog):
    train, _, _ = run
    result = train(validation=[])
    assert "selection" not in read_manifest(result.checkpoint) and "select/n" not in result.metrics
    assert "no validation instances" in caplog.text


def test_the_choice_runs_the_policies_with_the_catalogs_own_shortcut(records_qa, settings, tiny_dir):
    """Rollouts may turn the code interpreter's shortcut off (`episode.final_answer_line: false`);
    the exported policy is served with the catalog's own setting, so the choice runs there."""
    from toolorchestra.tools.experts import EpisodeContext

    _, instances, root, catalog = records_qa
    config = run_config(tiny_dir).model_copy(update={"episode": EpisodeConfig(final_answer_line=False)})
    training = RolloutEnvironment(catalog, settings, DomainLocator([root]), config.episode)
    served = served_environment(training, catalog)
    item = next(i for i in instances if i.task.get("category") == "arithmetic")
    call, context = {"code": item.task["program"]}, EpisodeContext(task=item.question)
    assert not training.setup(item).toolbox.call("code_interpreter", call, context).data.get("final")
    assert served.setup(item).toolbox.call("code_interpreter", call, context).data["final"]
    assert served.config.max_turns == training.config.max_turns  # only the shortcut differs
    unset = RolloutEnvironment(catalog, settings, DomainLocator([root]), run_config(tiny_dir).episode)
    assert served_environment(unset, catalog) is unset  # nothing overridden: the same environment
