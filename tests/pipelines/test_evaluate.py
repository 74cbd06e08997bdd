"""Stage `evaluate` through the stage runner: report files, identical task lists, clear errors, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.eval_fixtures import (
    make_checkpoint,
    read_jsonl,
    save_tiny_model,
    tiny_catalog_data,
    write_preferences,
    write_tasks_folder,
)

from stagekit.runner import run_stage
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings

SECTION = {
    "deps": {"model": "models/orchestrator", "tasks": "data/validated", "preferences": "data/preferences"},
    "outs": {"report": "reports/eval"},
    "benchmarks": [{"name": "toolscale", "kind": "toolscale", "max_tasks": 1},
                   {"name": "qa", "kind": "qa", "max_tasks": 2},
                   {"name": "preferences", "kind": "preferences", "max_tasks": 2}],
    "methods": {"champion": False},
    "episode": {"max_turns": 2, "max_tokens": 8},
    "batch_size": 8,
}


def make_workspace(root: Path, tiny_llm) -> Path:
    tiny = save_tiny_model(tiny_llm, root / "tiny")
    catalog = tiny_catalog_data(tiny)
    write_tasks_folder(root / "data" / "validated", tasks=10, qa=6)
    write_preferences(root / "data" / "preferences", catalog)
    make_checkpoint(tiny_llm, root / "models" / "orchestrator", base_model=tiny, catalog_data=catalog)
    write_params(root, {})
    return root


def write_params(root: Path, extra: dict) -> None:
    section = json.loads(json.dumps(SECTION))
    section.update(extra)
    (root / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 3}, "evaluate": section}, sort_keys=False))


@pytest.fixture(scope="module")
def workspace(tiny_llm, tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("ws"), tiny_llm)


def settings_of(root: Path) -> Settings:
    return Settings(workspace=root, state_dir=root / ".orchestra")


def test_stage_reports_every_method_on_identical_tasks(workspace):
    write_params(workspace, {})
    metrics = run_stage("evaluate", params_file=workspace / "params.yaml", settings=settings_of(workspace), track=False)
    report = workspace / "reports" / "eval"
    for name in ("metrics.json", "per_task.jsonl", "tasks.json", "adherence.jsonl", "table.json", "report.md",
                 "pareto.png"):
        assert (report / name).is_file(), name
    document = json.loads((report / "metrics.json").read_text())
    methods = [m["name"] for m in document["methods"]]
    assert methods == ["trained", "prompted", "expert:tiny", "random_router", "always_strongest", "cascade"]
    assert document["champion"] is None and document["weights_sha256"] and not document["train_set_known"]
    rows = read_jsonl(report / "per_task.jsonl")
    lists = {m: sorted(f"{r['key']}#{r['variant']}" for r in rows if r["method"] == m) for m in methods}
    assert len({tuple(v) for v in lists.values()}) == 1  # the identical task list for every method
    assert len(lists["trained"]) == len(json.loads((report / "tasks.json").read_text())) + 2  # + neutral runs
    # every episode carries its task's category, which the report's per-category table groups by
    assert all(r["category"] and (r["category"] == "tool_use") == (r["kind"] == "tool_use") for r in rows)
    assert "By task category" in (report / "report.md").read_text()
    scored = [r for r in rows if r["method"] == "trained" and r["variant"] != "neutral"]
    per_category = {k.split("/")[3]: v for k, v in metrics.items()
                    if k.startswith("eval/trained/category/") and k.endswith("/n")}
    assert per_category == {c: float(sum(r["category"] == c for r in scored)) for c in {r["category"] for r in scored}}
    assert {"accuracy", "cost_mean", "latency_mean", "eval/random_router/overall/accuracy",
            "eval/trained/preferences/adherence"} <= set(metrics)
    assert metrics["cost_mean"] > 0 and 0 <= metrics["accuracy"] <= 1
    from flows.report import report_markdown

    published = report_markdown(workspace)
    assert published.startswith("# Evaluation") and "data:image/png;base64," in published


@pytest.mark.parametrize(("extra", "message"), [
    ({"deps": {"model": "models/orchestrator", "tasks": "data/validated"}}, "deps.preferences is required"),
    ({"outs": {"report": "reports/eval.json"}}, "must be a folder path"),
    ({"judge": {"model": "tiny", "backend": {"kind": "local"}}}, "either `model`"),
    ({"benchmarks": [{"name": "x", "kind": "mystery"}]}, "evaluate.benchmarks"),
    ({"tools": ["web_search"]}, "not in the model's catalog"),
    ({"judge": {"model": "gpt-9"}}, "judge model 'gpt-9' is not a catalog model alias"),
])
def test_bad_parameters_are_clear_errors(workspace, extra, message):
    write_params(workspace, extra)
    try:
        with pytest.raises(ConfigError, match=message):
            run_stage("evaluate", params_file=workspace / "params.yaml", settings=settings_of(workspace), track=False)
    finally:
        write_params(workspace, {})


def test_cli_bench_and_model_overrides_write_beside_the_pipeline_output(workspace, monkeypatch):
    from typer.testing import CliRunner

    from orchestra_cli.main import app

    for key in [k for k in __import__("os").environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    write_params(workspace, {})
    pipeline_report = workspace / "reports" / "eval" / "metrics.json"
    before = pipeline_report.read_bytes() if pipeline_report.exists() else b""
    model = str(workspace / "models" / "orchestrator")
    result = CliRunner().invoke(app, ["evaluate", "--bench", "qa", "--model", model,
                                      "--params", str(workspace / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert "| trained (candidate) |" in result.output
    ad_hoc = json.loads((workspace / "reports" / "eval-adhoc" / "metrics.json").read_text())
    assert [b["name"] for b in ad_hoc["benchmarks"]] == ["qa"]
    after = pipeline_report.read_bytes() if before else b""
    assert after == before  # the pipeline's report is untouched
    import mlflow

    mlflow.set_tracking_uri(settings_of(workspace).tracking_uri)
    (run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    logged = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "eval")}
    assert {"eval/pareto.png", "eval/report.md", "eval/per_task.jsonl"} <= logged
    table = mlflow.MlflowClient().load_table(run.info.experiment_id, "evaluation/table.json",
                                             run_ids=[run.info.run_id])
    assert {"method", "benchmark", "accuracy", "cost_mean_usd", "latency_mean_s"} <= set(table.columns)
    per_task = mlflow.MlflowClient().load_table(run.info.experiment_id, "evaluation/per_task.json",
                                                run_ids=[run.info.run_id])
    assert len(per_task) == 6 * 2 and {"correct", "judge", "cost_usd"} <= set(per_task.columns)  # 6 methods x 2 QA
    assert run.data.metrics["accuracy"] == ad_hoc["summary"]["trained"]["overall"]["accuracy"]
    mlflow.flush_trace_async_logging()
    traces = mlflow.MlflowClient().search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id,
                                                 max_results=100)
    assert len(traces) == len(per_task)  # one trace per evaluation episode, linked to the stage's run
    assert {(t.info.tags["orchestra.method"], t.info.tags["orchestra.task"]) for t in traces} == \
        {(row["method"], row["task_id"]) for row in per_task.to_dict(orient="records")}
    bad = CliRunner().invoke(app, ["evaluate", "--bench", "nope", "--params", str(workspace / "params.yaml")])
    assert bad.exit_code != 0 and "known: ['toolscale', 'qa', 'preferences']" in str(bad.exception)


def test_llamacpp_engine_is_chosen_by_params_and_judges_like_transformers(workspace):
    """`engine: llamacpp` runs every local model (candidate, prompted base, expert) through llama.cpp
    (their GGUFs converted into the state folder) with the transformers engine's judgements."""
    pytest.importorskip("llama_cpp")
    results = {}
    for engine in ("transformers", "llamacpp"):
        write_params(workspace, {"engine": engine, "benchmarks": SECTION["benchmarks"][:2]})
        run_stage("evaluate", params_file=workspace / "params.yaml", settings=settings_of(workspace), track=False)
        rows = read_jsonl(workspace / "reports" / "eval" / "per_task.jsonl")
        results[engine] = sorted((r["method"], r["key"], r["correct"], json.dumps(r["tool_calls"], sort_keys=True),
                                  r["turns"]) for r in rows)
    converted = list((workspace / ".orchestra" / "models" / "gguf").glob("*.gguf"))
    assert converted  # the checkpoint, base model and expert (equal weights here: one file, by weights hash)
    assert results["llamacpp"] == results["transformers"]


def test_a_candidate_that_is_its_warm_start_is_run_once_and_the_choice_is_noted(workspace, tmp_path):
    """The train stage exported its warm start (GRPO's policy solved fewer validation tasks): the
    `sft_only` method would repeat the candidate's episodes, so it is not run, and the report says
    which policy the candidate is and why."""
    import shutil

    root = tmp_path / "ws"
    shutil.copytree(workspace, root, ignore=shutil.ignore_patterns(".orchestra", "reports"))
    model = root / "models" / "orchestrator"
    manifest = json.loads((model / "orchestrator.json").read_text())
    manifest["selection"] = {"chosen": "warm_start", "n": 29, "warm_start_solved": 20, "grpo_solved": 17,
                             "grpo_only": 1, "warm_start_only": 4, "reason": "GRPO's policy solved 17/29", "seconds": 1.0}
    (model / "orchestrator.json").write_text(json.dumps(manifest))
    shutil.copytree(model, root / "models" / "warm_start")
    section = json.loads(json.dumps(SECTION))
    section["deps"]["warm_start"] = "models/warm_start"
    section["benchmarks"] = [{"name": "qa", "kind": "qa", "max_tasks": 1}]
    section["methods"] = {"champion": False, "prompted": False, "experts": [], "random_router": False,
                          "always_strongest": False, "cascade": False, "sft_only": True}
    (root / "params.yaml").write_text(yaml.safe_dump({"base": {"seed": 3}, "evaluate": section}, sort_keys=False))
    run_stage("evaluate", params_file=root / "params.yaml", settings=settings_of(root), track=False)
    report = root / "reports" / "eval"
    assert [m["name"] for m in json.loads((report / "metrics.json").read_text())["methods"]] == ["trained"]
    text = " ".join((report / "report.md").read_text().split())
    assert "sft_only was not run: the warm start is the candidate itself" in text
    assert "the candidate is the SFT warm start's policy, chosen by the train stage on 29 validation tasks" in text
