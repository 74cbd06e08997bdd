"""`orchestra describe` and `orchestra preferences`, in process (model doubles patched in)."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers.pref_fixtures import ConstantExpert, SmartExpert, expert_catalog_data, write_validated

from orchestra_cli.main import main
from toolorchestra.tools.catalog import load_catalog


@pytest.fixture
def project(tmp_path, monkeypatch):
    write_validated(tmp_path / "tasks")
    (tmp_path / "experts.yaml").write_text(yaml.safe_dump(expert_catalog_data()))
    doubles = {"smart": SmartExpert("smart"), "constant": ConstantExpert("constant")}
    monkeypatch.setattr("toolorchestra.llm.config.build_llm", lambda config, settings, **_: doubles[config.model])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_describe_then_preferences(project, capsys):
    code = main(["describe", "--catalog", "experts.yaml", "--tasks", "tasks", "--out", "out/tools.json",
                 "--samples", "2", "--category", "qa_numeric", "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["catalog"] == str(project / "out" / "tools.json")
    assert {(r["tool"], r["model"]) for r in printed["stats"]} == {
        (t, m) for t in ("answer", "enhance_reasoning") for m in ("smart", "constant")}
    described = load_catalog(project / "out" / "tools.json")
    assert "QA numeric: 2/2 (100%) correct" in described.tool("answer").description

    code = main(["preferences", "--catalog", "out/tools.json", "--tasks", "tasks", "--out", "prefs",
                 "--datasets", "data", "--heldout", "local_only", "--eval-fraction", "0.3", "--seed", "4", "--json"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["report"]["heldout_kinds_in_eval_only"] == ["local_only"]
    assert (project / "prefs" / "train.jsonl").is_file() and (project / "data" / "verl" / "train.parquet").is_file()
    assert not list(project.glob(".*staging"))


def test_params_file_supplies_defaults_and_options_override(project, capsys):
    (project / "params.yaml").write_text(yaml.safe_dump({"preferences": {
        "deps": {"catalog": "experts.yaml", "tasks": "tasks"},
        "outs": {"preferences": "p", "datasets": "d"},
        "split": {"heldout_kinds": ["cost_latency"]}}}))
    assert main(["preferences"]) == 0
    out = capsys.readouterr().out
    assert "held-out kinds (eval only): cost_latency" in out and (project / "p" / "eval.jsonl").is_file()
    assert main(["preferences", "--out", "p2", "--heldout", "local_only"]) == 0
    assert "held-out kinds (eval only): local_only" in capsys.readouterr().out
    assert (project / "p2" / "eval.jsonl").is_file()


def test_errors_are_one_line_exit_2(project, capsys):
    assert main(["preferences", "--catalog", "experts.yaml", "--tasks", "nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "inputs do not exist: tasks=" in err[0] and "nowhere" in err[0]
    assert main(["preferences", "--catalog", "experts.yaml", "--tasks", "tasks", "--source", "llm"]) == 2
    assert "needs proposer and verifier" in capsys.readouterr().err
    assert main(["describe", "--catalog", "experts.yaml", "--tasks", "tasks", "--tool", "web_search"]) == 2
    assert "not LLM tools" in capsys.readouterr().err
    assert not (project / "data").exists()
