"""Stage `synthesize` through the stage runner: layout, metrics, determinism, parameter checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.third_party import THIRD_PARTY, third_party

from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.envs.domain import load_domain
from toolorchestra.envs.task import load_tasks
from toolorchestra.envs.toolspec import load_tools


def write_params(root: Path, **section) -> Path:
    params = {
        "base": {"seed": 3},
        "synthesize": {"deps": {}, "outs": {"toolscale": "data/toolscale", "qa": "data/qa"},
                       "domains": ["library"], "db_size": 20, "tasks_per_domain": 20, "qa_per_domain": 10,
                       **section},
    }
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def run(root: Path) -> dict[str, float]:
    return run_stage("synthesize", params_file=root / "params.yaml", settings=Settings(workspace=root, read_only_roots=(THIRD_PARTY,)), track=False)


def test_embedded_domain_layout_and_metrics(tmp_path):
    write_params(tmp_path)
    metrics = run(tmp_path)
    assert metrics["tasks_library"] == 20 and metrics["qa_library"] == 10 and metrics["domains"] == 1
    assert metrics["evolved_total"] == 5 and metrics["domains_short_of_tasks"] == 0
    folder = tmp_path / "data" / "toolscale" / "library"
    assert {p.name for p in folder.iterdir()} == {"db.json", "policy.md", "tools.json", "tasks.json", "synthesis.json"}
    domain = load_domain(folder)
    assert domain.tools and {s.name for s in domain.tools} == {s.name for s in load_tools(folder / "tools.json")}
    assert len(load_tasks(folder / "tasks.json")) == 20
    qa = [json.loads(line) for line in (tmp_path / "data/qa/library.jsonl").read_text().splitlines()]
    assert len(qa) == 10 and (tmp_path / "data/qa/docs/library.jsonl").exists()
    first = (folder / "tasks.json").read_text()
    run(tmp_path)  # same seed, same bytes; outputs replaced atomically
    assert (folder / "tasks.json").read_text() == first
    assert not list((tmp_path / "data").glob(".*staging*"))


def test_seed_database_folder_as_dep(tmp_path):
    mock = third_party("tau2-mock")
    write_params(tmp_path, domains=[], deps={"domain_mock": str(mock)}, tasks_per_domain=50)
    metrics = run(tmp_path)
    assert metrics["tasks_mock"] == 50
    assert (tmp_path / "data/toolscale/mock/policy.md").read_text() == (mock / "policy.md").read_text()


@pytest.mark.parametrize(
    ("section", "pattern"),
    [
        ({"domains": ["zoo"]}, "unknown embedded domain 'zoo'"),
        ({"tasks_per_domain": 0}, "synthesize.tasks_per_domain: Input should be greater than or equal to 1"),
        ({"outs": {"toolscale": "data/toolscale"}}, "outs.qa is required"),
        ({"llm": {"enabled": True}}, "llm.enabled needs llm.backend"),
        ({"procedural": {"max_hops": 9}}, "synthesize.procedural.max_hops"),
        ({"colour": "red"}, "synthesize.colour: Extra inputs are not permitted"),
        # Sizes are bounded, the bound named: 1e12 rows used to grow memory without end.
        ({"db_size": 10**12}, "synthesize.db_size: Input should be less than or equal to 100000"),
        ({"tasks_per_domain": 10**9}, "synthesize.tasks_per_domain: Input should be less than or equal to 100000"),
    ],
)
def test_bad_parameters(tmp_path, section, pattern):
    write_params(tmp_path, **section)
    with pytest.raises(ConfigError, match=pattern):
        run(tmp_path)


def test_outputs_outside_the_workspace_are_refused_before_anything_is_touched(tmp_path):
    ws, victim = tmp_path / "ws", tmp_path / "victim"
    ws.mkdir()
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    write_params(ws, outs={"toolscale": str(victim), "qa": "data/qa"})
    with pytest.raises(ConfigError, match=rf"params.yaml: synthesize.outs.toolscale: output path '{victim}' .*"
                                          "outside the workspace"):
        run(ws)
    assert (victim / "keep.txt").read_text() == "precious" and [p.name for p in victim.iterdir()] == ["keep.txt"]
    assert not (ws / "data").exists()  # nothing was staged either


def test_a_stage_never_replaces_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    write_params(tmp_path, outs={"toolscale": "mine", "qa": "data/qa"})
    with pytest.raises(ConfigError, match="synthesize.outs.toolscale: output path .*mine exists and was not "
                                          "written by stage 'synthesize'"):
        run(tmp_path)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "the user's"
    write_params(tmp_path, outs={"toolscale": "data/toolscale", "qa": "data/qa"})
    run(tmp_path)
    run(tmp_path)  # its own output it may replace


def test_an_input_outside_the_workspace_needs_a_read_only_root(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "ws").mkdir()
    write_params(tmp_path / "ws", deps={"domain_x": str(outside)})
    with pytest.raises(ConfigError, match="synthesize.deps.domain_x: input path .* ORCHESTRA_READ_ONLY_ROOTS"):
        run_stage("synthesize", params_file=tmp_path / "ws" / "params.yaml",
                  settings=Settings(workspace=tmp_path / "ws"), track=False)
