"""`orchestra synthesize` and `orchestra validate`: ToolScale on one domain folder.

Output folders (`--out`, `--report`) must lie inside the workspace (the project around the
current folder, else the current folder itself; see `toolorchestra/core/paths.py`).

`orchestra synthesize --domain DIR --out DIR [--tasks N] [--seed S]` reads a domain folder
(`db.json`, optional `policy.md`, `tools.json`) or an embedded domain name (library, clinic,
telecom) and writes a complete domain folder: db.json, policy.md, tools.json, tasks.json,
qa.jsonl, docs.jsonl, synthesis.json.

`orchestra validate --domain DIR [--report DIR] [--out DIR]` filters DIR's tasks, writes the kept
tasks to `--out` (default `DIR/validated`) and the Data Docs + statistics to `--report` (default
`DIR/report`), prints the per-filter counts, and exits 0 only if the suite passes (1 otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from orchestra_cli.app import app


@app.command()
def synthesize(
    domain: Annotated[str, typer.Option(help="domain folder with db.json, or an embedded domain name")],
    out: Annotated[Path, typer.Option(help="folder to write the synthesized domain into")],
    tasks: Annotated[int, typer.Option(min=1, max=100_000, help="number of tasks")] = 60,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    qa: Annotated[int, typer.Option(min=0, max=100_000, help="number of QA items")] = 40,
    evolve_fraction: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of evolved tasks")] = 0.25,
) -> None:
    """Synthesize tools, tasks and QA items for one domain."""
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.core.paths import check_output_folder
    from toolorchestra.core.settings import load_settings
    from toolorchestra.envs.domain import load_domain
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import embedded_names, load_embedded

    settings = load_settings()
    out = check_output_folder(out, settings.workspace, state=settings.state, key="--out")
    source = Path(domain)
    if source.is_dir():
        dom = load_domain(source)
    elif domain in embedded_names():
        dom = load_embedded(domain, seed=seed)
    else:
        raise ConfigError(source, f"not a domain folder nor an embedded domain ({', '.join(embedded_names())})",
                          key="--domain")
    result = synthesize_domain(dom, tasks=tasks, seed=seed, evolve_fraction=evolve_fraction, qa=qa)
    write_domain_folder(out, result)
    typer.echo(f"{dom.name}: {len(result.specs)} tools, {len(result.tasks)} tasks "
               f"({result.evolved} evolved), {len(result.qa)} QA items -> {out}")
    if result.report.note:
        typer.echo(f"note: {result.report.note}")


@app.command()
def validate(
    domain: Annotated[Path, typer.Option(help="synthesized domain folder (db.json, tools.json, tasks.json)")],
    report: Annotated[Path | None, typer.Option(help="folder for Data Docs and statistics")] = None,
    out: Annotated[Path | None, typer.Option(help="folder for the kept tasks")] = None,
    min_actions: Annotated[int, typer.Option(min=0)] = 1,
    max_actions: Annotated[int, typer.Option(min=1)] = 30,
    min_tasks: Annotated[int, typer.Option(min=0, help="tasks the domain must keep")] = 1,
) -> None:
    """Filter a domain folder's tasks and run the validation suite; exit 1 if it fails."""
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.core.paths import check_output_folder
    from toolorchestra.core.settings import load_settings
    from toolorchestra.synthesis.validation import ValidationConfig, validate_domains

    if not domain.is_dir():
        raise ConfigError(domain, "not a domain folder", key="--domain")
    settings = load_settings()
    report = check_output_folder(report or domain / "report", settings.workspace, state=settings.state,
                                 key="--report")
    out = check_output_folder(out or domain / "validated", settings.workspace, state=settings.state, key="--out")
    qa_file = domain / "qa.jsonl"
    config = ValidationConfig(min_actions=min_actions, max_actions=max_actions, min_tasks_per_domain=min_tasks)
    outcome = validate_domains([domain], out=out, report=report, config=config,
                               qa_files=[qa_file] if qa_file.exists() else None, qa_out=out)
    for name, counts in outcome.counts.items():
        typer.echo(f"{name}: " + json.dumps(counts))
    typer.echo(f"data docs: {report / 'data_docs' / 'index.html'}")
    if not outcome.success:
        typer.echo("validation suite FAILED:\n  " + "\n  ".join(outcome.failures()), err=True)
        raise typer.Exit(1)
    typer.echo("validation suite passed")
