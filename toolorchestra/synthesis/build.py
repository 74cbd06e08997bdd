"""Synthesize one domain end to end and write it as a domain folder.

`synthesize_domain` runs procedural synthesis, evolves a share of the tasks, and makes QA items;
`write_domain_folder` writes `db.json`, `policy.md` (if any), `tools.json`, `tasks.json`,
`qa.jsonl` (and `docs.jsonl`, the records as local-search documents) plus `synthesis.json` (what
was asked, produced and rejected, and why fewer came out). Used by the `synthesize` stage and by
`orchestra synthesize`.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.fs import atomic_write_json, atomic_write_jsonl, atomic_write_text
from toolorchestra.envs.domain import Domain
from toolorchestra.envs.task import Task, dump_tasks
from toolorchestra.envs.toolspec import ToolSpec, dump_specs
from toolorchestra.synthesis.evolve import evolve_task
from toolorchestra.synthesis.procedural import ProceduralConfig, ProceduralSynthesizer, SynthesisReport, stable_seed
from toolorchestra.synthesis.qa import records_as_documents, synthesize_qa


class SynthesizedDomain(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    domain: Domain
    specs: list[Any]
    tasks: list[Task]
    qa: list[dict[str, Any]] = Field(default_factory=list)
    report: SynthesisReport
    evolved: int = 0


def synthesize_domain(
    domain: Domain,
    *,
    tasks: int,
    seed: int,
    evolve_fraction: float = 0.25,
    qa: int = 0,
    arithmetic_fraction: float = 0.0,
    numeric_fraction: float = 0.4,
    config: ProceduralConfig | None = None,
    specs: list[ToolSpec] | None = None,
) -> SynthesizedDomain:
    """`tasks` tasks in all: procedural ones plus about `evolve_fraction` of them evolved."""
    specs = specs if specs is not None else domain.tool_specs()
    synth = ProceduralSynthesizer(domain, specs, seed=seed, config=config)
    n_evolve = int(round(tasks * evolve_fraction))
    base_tasks, report = synth.generate(tasks - n_evolve)
    rng = random.Random(stable_seed("pick-evolve", seed, domain.name))
    evolved: list[Task] = []
    for task in rng.sample(base_tasks, len(base_tasks)):
        if len(evolved) >= n_evolve:
            break
        harder = evolve_task(task, synth, seed=seed)
        if harder is not None:
            evolved.append(harder)
    if len(base_tasks) + len(evolved) < tasks and report.note is None:
        report.note = f"only {len(evolved)} of {n_evolve} tasks could be evolved"
    items = synthesize_qa(domain, qa, seed=seed, arithmetic_fraction=arithmetic_fraction,
                          numeric_fraction=numeric_fraction) if qa else []
    return SynthesizedDomain(domain=domain, specs=specs, tasks=base_tasks + evolved, qa=items, report=report,
                             evolved=len(evolved))


def write_domain_folder(out: str | Path, result: SynthesizedDomain, *, qa_file: str | Path | None = None,
                        docs_file: str | Path | None = None) -> Path:
    """Write the domain folder; QA items and documents go beside it unless paths are given."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    domain = result.domain
    atomic_write_json(out / "db.json", domain.db)
    if domain.policy:
        atomic_write_text(out / "policy.md", domain.policy)
    atomic_write_json(out / "tools.json", dump_specs(result.specs))
    atomic_write_json(out / "tasks.json", dump_tasks(result.tasks))
    if result.qa:
        atomic_write_jsonl(Path(qa_file) if qa_file else out / "qa.jsonl", result.qa)
    atomic_write_jsonl(Path(docs_file) if docs_file else out / "docs.jsonl", records_as_documents(domain))
    atomic_write_json(out / "synthesis.json", {
        **result.report.model_dump(mode="json"), "evolved": result.evolved, "tasks": len(result.tasks),
        "qa": len(result.qa), "tools": len(result.specs),
    })
    return out
