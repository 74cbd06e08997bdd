"""Validate synthesized domain folders: filters, Great Expectations suites, kept outputs.

For each domain folder (`db.json`, `tools.json`, `tasks.json`, ...) the task filters run
(`filters.py`), the kept tasks are written with the domain's files to `<out>/<domain>/`, and QA
files lose invalid and duplicate items. Then the GX suites run on the kept task table and QA table,
Data Docs go to `<report>/data_docs/`, and `<report>/filter_stats.json` and `suites.json` record
the per-filter counts and failing expectations. Used by the `validate` stage and by
`orchestra validate`; callers decide what a failed suite means (the stage raises, the CLI exits 1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json, atomic_write_jsonl
from toolorchestra.envs.domain import load_domain
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.task import dump_tasks
from toolorchestra.synthesis.expectations import SuiteReport, qa_rows, run_suites, task_rows
from toolorchestra.synthesis.filters import FILTERS, filter_tasks, resolve_solver
from toolorchestra.synthesis.qa import ANSWER_TYPES, load_qa


class PassAtK(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    k: int = Field(8, ge=1, le=64)
    solver: str = "golden"
    """A named solver (`golden`, `empty`); an LLM agent solver plugs in through `filter_tasks`."""


class ValidationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    min_actions: int = Field(1, ge=0, le=10_000)
    max_actions: int = Field(30, ge=1, le=10_000)
    min_tasks_per_domain: int = Field(1, ge=0, le=1_000_000)
    min_qa: int = Field(0, ge=0, le=1_000_000)
    pass_at_k: PassAtK = PassAtK()


class ValidationOutcome(BaseModel):
    counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Per domain (and `qa`): per-filter counts."""
    suites: dict[str, SuiteReport] = Field(default_factory=dict)

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites.values())

    def totals(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, counts in self.counts.items():
            if name == "qa":
                continue
            for key, value in counts.items():
                out[key] = out.get(key, 0) + value
        return out

    def failures(self) -> list[str]:
        return [f"{name}: {f}" for name, rep in self.suites.items() for f in rep.failures]


def domain_dirs(root: Path) -> list[Path]:
    """Domain folders under `root` (or `root` itself when it is one)."""
    if (root / "db.json").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "db.json").exists())


def _read_tasks(path: Path) -> list[Any]:
    if not path.exists():
        raise ConfigError(path, "file not found: a synthesized domain folder needs tasks.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, list):
        raise ConfigError(path, "expected a JSON list of tasks", "$")
    return data


def filter_qa(items: list[Any]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    kept, seen = [], set()
    counts = {"input": len(items), "dropped_invalid": 0, "dropped_duplicate": 0}
    for item in items:
        ok = (isinstance(item, dict) and all(isinstance(item.get(k), str) and item[k].strip()
                                             for k in ("id", "question", "answer", "category"))
              and item.get("answer_type") in ANSWER_TYPES)
        if not ok:
            counts["dropped_invalid"] += 1
        elif item["question"] in seen or item["id"] in {k["id"] for k in kept}:
            counts["dropped_duplicate"] += 1
        else:
            seen.add(item["question"])
            kept.append(item)
    counts["kept"] = len(kept)
    return kept, counts


def validate_domains(dirs: list[Path], *, out: Path, report: Path, config: ValidationConfig,
                     qa_files: list[Path] | None = None, qa_out: Path | None = None) -> ValidationOutcome:
    outcome = ValidationOutcome()
    solver = resolve_solver(config.pass_at_k.solver) if config.pass_at_k.enabled else None
    rows: list[dict[str, Any]] = []
    for folder in dirs:
        domain = load_domain(folder)
        env = DomainEnv(domain)
        result = filter_tasks(_read_tasks(folder / "tasks.json"), env, solver=solver, k=config.pass_at_k.k)
        outcome.counts[domain.name] = result.counts
        rows.extend(task_rows(domain.name, result.kept, env))
        target = out / domain.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ("db.json", "policy.md", "tools.json"):
            if (folder / name).exists():
                shutil.copyfile(folder / name, target / name)
        atomic_write_json(target / "tasks.json", dump_tasks(result.kept))
        atomic_write_json(target / "dropped.json", result.reasons)
    qa_kept: list[dict[str, Any]] = []
    qa_counts = {"input": 0, "dropped_invalid": 0, "dropped_duplicate": 0, "kept": 0}
    for path in qa_files or []:
        kept, counts = filter_qa(load_qa(path))
        qa_kept.extend(kept)
        for key, value in counts.items():
            qa_counts[key] += value
        if qa_out is not None:
            atomic_write_jsonl(qa_out / path.name, kept)
    if qa_files:
        outcome.counts["qa"] = qa_counts
    tables: dict[str, list[dict[str, Any]]] = {"tasks": rows}
    if qa_files:
        tables["qa"] = qa_rows(qa_kept)
    outcome.suites = run_suites(
        tables, report / "data_docs", min_tasks=1 if dirs else 0, min_qa=config.min_qa,
        min_actions=config.min_actions, max_actions=config.max_actions,
        min_tasks_per_domain=config.min_tasks_per_domain,
    )
    atomic_write_json(report / "filter_stats.json", {"filters": list(FILTERS), "counts": outcome.counts,
                                                     "totals": outcome.totals()})
    atomic_write_json(report / "suites.json", {k: v.model_dump(mode="json") for k, v in outcome.suites.items()})
    return outcome
