"""Stage `preferences` through the stage runner: outputs in place, exports loadable, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.pref_fixtures import expert_catalog_data, write_validated

from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.preferences.pairs import load_pairs
from toolorchestra.preferences.split import leaks


@pytest.fixture
def workspace(tmp_path):
    write_validated(tmp_path / "data" / "validated")
    (tmp_path / "data" / "catalog").mkdir(parents=True)
    (tmp_path / "data" / "catalog" / "tools.json").write_text(json.dumps(expert_catalog_data()))
    write_params(tmp_path, {})
    return tmp_path


def write_params(root: Path, extra: dict) -> None:
    section = {"deps": {"catalog": "data/catalog/tools.json", "tasks": "data/validated"},
               "outs": {"preferences": "data/preferences", "datasets": "data/datasets"},
               "split": {"eval_fraction": 0.25, "heldout_kinds": ["cost_latency", "local_only"]},
               "assembly": {"instances_per_task": 2, "eval_task_fraction": 0.25}}
    for key, value in extra.items():
        section[key] = {**section.get(key, {}), **value} if isinstance(value, dict) else value
    (root / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 11}, "preferences": section}))


def run(root: Path):
    return run_stage("preferences", params_file=root / "params.yaml", settings=Settings(workspace=root), track=False)


def test_stage_writes_splits_and_datasets(workspace):
    import datasets

    metrics = run(workspace)
    prefs, data = workspace / "data" / "preferences", workspace / "data" / "datasets"
    train, evaluation = load_pairs(prefs / "train.jsonl"), load_pairs(prefs / "eval.jsonl")
    assert leaks(train, evaluation) == []
    assert metrics["kinds_eval_only"] == 2 and metrics["pairs_train"] == len(train)
    hf = datasets.load_from_disk(str(data / "hf"))
    assert len(hf["train"]) == metrics["instances_train"] and len(hf["eval"]) == metrics["instances_eval"]
    assert (data / "verl" / "train.parquet").is_file() and (data / "verl" / "eval.parquet").is_file()
    report = json.loads((prefs / "report.json").read_text())
    assert report["suite"]["success"] and report["instances"]["train"] == len(hf["train"])
    # base.seed reached every phase: a different seed gives a different split or assembly
    first = (prefs / "train.jsonl").read_text()
    write_params(workspace, {"seed": 12})
    run(workspace)
    assert (prefs / "train.jsonl").read_text() != first


@pytest.mark.parametrize(("extra", "message"), [
    ({"outs": {"datasets": None}}, "outs.datasets is required"),
    ({"split": {"seed": 1}}, "set the seed once"),
    ({"generator": {"source": "llm"}}, "needs proposer and verifier"),
    ({"generator": {"kinds": ["vibes"]}}, "unknown preference kinds"),
    ({"proposer": "gpt-9", "verifier": "smart", "generator": {"source": "llm"}}, "proposer 'gpt-9' is not a model alias"),
    ({"assembly": {"price_jitter": 0.5}}, "preferences.assembly.price_jitter"),
])
def test_bad_parameters_are_clear_errors(workspace, extra, message):
    write_params(workspace, {k: v for k, v in extra.items() if k != "outs"})
    if "outs" in extra:
        params = yaml.safe_load((workspace / "params.yaml").read_text())
        del params["preferences"]["outs"]["datasets"]
        (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=message):
        run(workspace)
    assert not (workspace / "data" / "preferences").exists()


def test_missing_catalog_names_the_stage_input(workspace):
    (workspace / "data" / "catalog" / "tools.json").unlink()
    with pytest.raises(ConfigError, match=r"inputs do not exist: catalog=data/catalog/tools.json"):
        run(workspace)
