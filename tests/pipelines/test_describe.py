"""Stage `describe` through the stage runner: parameters, atomic output, MLflow table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.pref_fixtures import ConstantExpert, SmartExpert, expert_catalog_data, write_validated

from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.tools.catalog import load_catalog


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    write_validated(tmp_path / "data" / "validated")
    (tmp_path / "catalogs").mkdir()
    (tmp_path / "catalogs" / "experts.yaml").write_text(yaml.safe_dump(expert_catalog_data()))
    write_params(tmp_path, {})
    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    # The catalog's local models resolve to the test doubles; everything else is the real stage.
    monkeypatch.setattr("toolorchestra.llm.config.build_llm", lambda config, settings, **_: doubles[config.model])
    return tmp_path


def write_params(root: Path, extra: dict) -> None:
    section = {"deps": {"catalog": "catalogs/experts.yaml", "tasks": "data/validated"},
               "outs": {"catalog": "data/catalog/tools.json"},
               "measure": {"samples_per_category": 2, "max_workers": 1}}
    for key, value in extra.items():
        section[key] = {**section.get(key, {}), **value} if isinstance(value, dict) else value
    (root / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 5}, "describe": section}))


def run(root: Path, **kw):
    return run_stage("describe", params_file=root / "params.yaml", settings=Settings(workspace=root), **kw)


def test_stage_writes_a_valid_described_catalog(workspace):
    metrics = run(workspace, track=False)
    out = workspace / "data" / "catalog" / "tools.json"
    catalog = load_catalog(out)
    assert "Measured on sampled tasks" in catalog.tool("answer").description
    assert catalog.tool("answer").stats["describe"]["seed"] == 5  # base.seed reached the stage
    assert metrics["accuracy/answer/smart/qa_numeric"] == 1.0 and metrics["accuracy/answer/constant/tool_use"] == 0.0
    assert metrics["tools_described"] == 2 and metrics["models_measured"] == 2
    assert not list(out.parent.glob(".*staging*"))


def test_mlflow_gets_the_stats_table(workspace):
    import mlflow

    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    settings = Settings(workspace=workspace)
    run_stage("describe", params_file=workspace / "params.yaml", settings=settings, track=True)
    mlflow.set_tracking_uri(settings.tracking_uri)
    (found,) = mlflow.search_runs(search_all_experiments=True, filter_string="tags.`orchestra.stage` = 'describe'",
                                  output_format="list")
    client = mlflow.MlflowClient()
    files = {f.path for f in client.list_artifacts(found.info.run_id, "describe")}
    assert {"describe/tool_stats.json", "describe/records.json"} <= files
    table = json.loads(Path(client.download_artifacts(found.info.run_id, "describe/tool_stats.json")).read_text())
    assert len(table["data"]) == 2 * 2 * 3  # tools x models x categories
    assert found.data.metrics["accuracy/enhance_reasoning/smart/qa_numeric"] == 1.0


@pytest.mark.parametrize(("extra", "message"), [
    ({"deps": {"tasks": None}}, "deps.tasks is required"),
    ({"measure": {"seed": 3}}, "set the seed once"),
    ({"measure": {"categories": ["poetry"]}}, "describe.measure.categories"),
    ({"summarizer": "gpt-9"}, "summarizer 'gpt-9' is not a model alias"),
    ({"measure": {"tools": ["web_search"]}}, "not LLM tools"),
])
def test_bad_parameters_are_clear_errors(workspace, extra, message):
    write_params(workspace, extra)
    if extra.get("deps"):
        params = yaml.safe_load((workspace / "params.yaml").read_text())
        del params["describe"]["deps"]["tasks"]
        (workspace / "params.yaml").write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match=message):
        run(workspace, track=False)
    assert not (workspace / "data" / "catalog" / "tools.json").exists()


def test_no_tasks_is_a_clear_error(workspace):
    (workspace / "empty").mkdir()
    write_params(workspace, {"deps": {"tasks": "empty"}})
    with pytest.raises(ConfigError, match="no tasks found"):
        run(workspace, track=False)
