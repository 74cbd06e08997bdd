"""`orchestra describe` and `orchestra preferences`: the two stages, run ad hoc.

Each command starts from the stage's section of `params.yaml` (when there is one; `--params`
names another file) and applies the options on top, validated by the stage's own `Params`, then
runs the stage's code with the paths given. Paths from options are relative to the current
folder; paths from the parameters file to the workspace. Outputs are written atomically: the
catalog file by rename, the preference and dataset folders staged and swapped in at the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestra_cli.app import app


def _params(stage: str, params_file: Path | None, overrides: dict[str, Any], workspace: Path,
            defaults: dict[str, dict[str, Path]]) -> Any:
    """The stage's validated Params: its params.yaml section (if any), then `overrides` (options
    left unset are None), then `defaults` for paths that neither gives."""
    from stagekit.runner import load_params_file, stage_module, validate_params

    source = (params_file or workspace / "params.yaml").resolve()
    all_params: dict[str, Any] = {}
    if params_file is not None or source.is_file():
        all_params = load_params_file(source)
    section = dict(all_params.get(stage) or {})
    for key in ("deps", "outs"):
        merged = {k: str((workspace / v).resolve()) for k, v in (section.get(key) or {}).items()}
        merged.update({k: str(v.resolve()) for k, v in overrides.pop(key, {}).items() if v is not None})
        for name, default in defaults.get(key, {}).items():
            merged.setdefault(name, str(default.resolve()))
        section[key] = merged
    for key, value in overrides.items():
        if isinstance(value, dict):
            section[key] = {**(section.get(key) or {}), **{k: v for k, v in value.items() if v is not None}}
        elif value is not None:
            section[key] = value
    validated = validate_params(stage, stage_module(stage), {**all_params, stage: section}, source)
    _check_outputs(validated, stage, workspace)
    return validated


def _check_outputs(params: Any, stage: str, workspace: Path) -> None:
    """Outputs stay inside the workspace, out of its state folders (see core/paths.py)."""
    from toolorchestra.core.paths import check_output

    for name, value in params.outs.items():
        check_output(value, workspace, file=None, key=f"{stage}.outs.{name}")


def _print_table(rows: list[dict[str, Any]], columns: list[str], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in columns))
    Console().print(table)


@app.command()
def describe(
    catalog: Annotated[Path | None, typer.Option(help="source catalog (YAML/JSON); default: params.yaml, else the embedded one")] = None,
    tasks: Annotated[Path | None, typer.Option(help="validated tasks folder (tasks.json / QA .jsonl)")] = None,
    domains: Annotated[Path | None, typer.Option(help="domain folders, when tasks.json has no db.json beside it")] = None,
    out: Annotated[Path | None, typer.Option(help="where to write the described catalog (JSON)")] = None,
    samples: Annotated[int | None, typer.Option(min=1, help="tasks per category")] = None,
    tool: Annotated[list[str] | None, typer.Option(help="only these LLM tools (repeatable)")] = None,
    category: Annotated[list[str] | None, typer.Option(help="qa_numeric, qa_lookup, tool_use (repeatable)")] = None,
    max_turns: Annotated[int | None, typer.Option(min=1, help="turns of a tool-use episode")] = None,
    summarizer: Annotated[str | None, typer.Option(help="catalog model alias that summarises strengths and failures")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    params: Annotated[Path | None, typer.Option(help="parameters file (default: ./params.yaml if present)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the measured table as JSON")] = False,
) -> None:
    """Measure every LLM tool on sampled tasks and write a catalog whose descriptions state the figures."""
    from pipelines.describe import describe as run_describe
    from toolorchestra.core.settings import load_settings
    from toolorchestra.tools.catalog import embedded_catalog_path

    settings = load_settings()
    from stagekit.runner import existing_deps

    ws = settings.workspace
    overrides: dict[str, Any] = {
        "deps": {"catalog": catalog, "tasks": tasks, "domains": domains}, "outs": {"catalog": out},
        "seed": seed, "summarizer": summarizer,
        "measure": {"samples_per_category": samples, "tools": tool or None, "categories": category or None,
                    "max_turns": max_turns},
    }
    p = _params("describe", params, overrides, ws, {
        "deps": {"catalog": embedded_catalog_path(), "tasks": ws / "data/validated"},
        "outs": {"catalog": ws / "data/catalog/tools.json"}})
    deps = existing_deps(p, ws, "describe")
    metrics, measurement = run_describe(p, catalog_path=deps["catalog"], tasks_path=deps["tasks"],
                                        domains_path=deps.get("domains"), out_path=Path(p.outs["catalog"]),
                                        settings=settings)
    rows = measurement.rows()
    if as_json:
        typer.echo(json.dumps({"catalog": p.outs["catalog"], "stats": rows, "metrics": metrics}))
        return
    _print_table(rows, ["tool", "model", "category", "n", "accuracy", "mean_prompt_tokens",
                        "mean_completion_tokens", "mean_cost_usd", "mean_latency_s"], "measured behaviour")
    typer.echo(f"wrote {p.outs['catalog']}")


@app.command()
def preferences(
    catalog: Annotated[Path | None, typer.Option(help="catalog (default: params.yaml, else data/catalog/tools.json)")] = None,
    tasks: Annotated[Path | None, typer.Option(help="validated tasks folder (tasks.json / QA .jsonl)")] = None,
    domains: Annotated[Path | None, typer.Option(help="domain folders, when tasks.json has no db.json beside it")] = None,
    out: Annotated[Path | None, typer.Option(help="folder for train.jsonl / eval.jsonl / report.json")] = None,
    datasets: Annotated[Path | None, typer.Option(help="folder for the verl parquet and HF dataset exports")] = None,
    source: Annotated[str | None, typer.Option(help="grammar, llm or both")] = None,
    proposer: Annotated[str | None, typer.Option(help="catalog model alias proposing pairs (llm source)")] = None,
    verifier: Annotated[str | None, typer.Option(help="catalog model alias verifying pairs (llm source)")] = None,
    eval_fraction: Annotated[float | None, typer.Option(min=0.0, max=1.0)] = None,
    heldout: Annotated[list[str] | None, typer.Option(help="preference kinds only in eval (repeatable)")] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    params: Annotated[Path | None, typer.Option(help="parameters file (default: ./params.yaml if present)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Generate preference pairs, split them without leakage, and export the randomised training set."""
    from pipelines.preferences import make_preferences
    from toolorchestra.core.fs import staged_dir
    from toolorchestra.core.settings import load_settings

    settings = load_settings()
    from stagekit.runner import existing_deps

    ws = settings.workspace
    overrides: dict[str, Any] = {
        "deps": {"catalog": catalog, "tasks": tasks, "domains": domains},
        "outs": {"preferences": out, "datasets": datasets},
        "seed": seed, "proposer": proposer, "verifier": verifier,
        "generator": {"source": source}, "split": {"eval_fraction": eval_fraction, "heldout_kinds": heldout or None},
    }
    p = _params("preferences", params, overrides, ws, {
        "deps": {"catalog": ws / "data/catalog/tools.json", "tasks": ws / "data/validated"},
        "outs": {"preferences": ws / "data/preferences", "datasets": ws / "data/datasets"}})
    deps = existing_deps(p, ws, "preferences")
    with staged_dir(p.outs["preferences"]) as pref_dir, staged_dir(p.outs["datasets"]) as data_dir:
        metrics, build = make_preferences(p, catalog_path=deps["catalog"], tasks_path=deps["tasks"],
                                          domains_path=deps.get("domains"), preferences_dir=pref_dir,
                                          datasets_dir=data_dir, settings=settings)
    report = build.report()
    if as_json:
        typer.echo(json.dumps({"report": report, "metrics": metrics, "outs": p.outs}))
        return
    rows = [{"split": split, "kind": kind, "pairs": n} for split, kinds in report["kinds"].items()
            for kind, n in sorted(kinds.items())]
    _print_table(rows, ["split", "kind", "pairs"], "preference pairs")
    typer.echo(f"held-out kinds (eval only): {', '.join(report['heldout_kinds_in_eval_only']) or 'none'}")
    typer.echo(f"instances: {report['instances']}; wrote {p.outs['preferences']} and {p.outs['datasets']}")
