"""Great Expectations suites on the synthesized task table and QA table, with Data Docs.

The task table has one row per kept task: a unique `key` (`domain/id`), instruction length, the
number of kept tasks of its domain (at least `min_tasks_per_domain`),
number of golden actions (within `[min_actions, max_actions]`), how many golden tool names are
missing from the domain's `tools.json` (must be 0), whether the golden replay succeeds on a fresh
copy (recomputed here, independently of the filters) and whether `communicate_info` is a list of
non-empty strings. The QA table checks unique ids, non-empty questions and answers, known
answer types and that numeric answers parse as numbers.

Suites run in an ephemeral GX context (nothing is written into the repository); Data Docs HTML
goes to `docs_dir`. `SuiteReport.failures` lists every failing expectation with examples, and
`raise_on_failure` turns them into one `OrchestraError`. great_expectations is imported lazily: it
costs seconds.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.core.errors import OrchestraError
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.engine import ReplayError
from toolorchestra.envs.evaluation import golden_state
from toolorchestra.envs.task import Task
from toolorchestra.synthesis.qa import ANSWER_TYPES


class SuiteReport(BaseModel):
    name: str
    success: bool
    evaluated: int
    failures: list[str] = Field(default_factory=list)
    docs_index: str | None = None


def task_rows(domain: str, tasks: list[Task], env: DomainEnv) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        try:
            golden_state(env.engine, env.base, task)
            replay_ok = True
        except ReplayError:
            replay_ok = False
        info = task.evaluation_criteria.communicate_info if task.evaluation_criteria else None
        rows.append({
            "key": f"{domain}/{task.id}",
            "domain": domain,
            "id": task.id,
            "instructions_chars": len(task.user_scenario.instructions_text().strip()),
            "n_actions": len(task.actions),
            "unknown_tools": len({a.name for a in task.actions} - set(env.engine.specs)),
            "replay_ok": replay_ok,
            "domain_tasks": len(tasks),
            "communicate_ok": info is None or (isinstance(info, list) and all(isinstance(s, str) and s.strip() for s in info)),
        })
    return rows


def qa_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for item in items:
        answer = item.get("answer")
        numeric_ok = True
        if item.get("answer_type") == "numeric":
            try:
                float(str(answer))
            except ValueError:
                numeric_ok = False
        rows.append({
            "id": item.get("id"),
            "question_chars": len(str(item.get("question") or "").strip()),
            "answer_chars": len(str(answer).strip()) if answer is not None else 0,
            "answer_type": item.get("answer_type"),
            "category": item.get("category"),
            "numeric_ok": numeric_ok,
        })
    return rows


def _task_suite(gxe: Any, min_rows: int, min_actions: int, max_actions: int, per_domain: int) -> list[Any]:
    return [
        gxe.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gxe.ExpectColumnValuesToBeBetween(column="domain_tasks", min_value=per_domain),
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="key"),
        gxe.ExpectColumnValuesToBeBetween(column="instructions_chars", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="n_actions", min_value=min_actions, max_value=max_actions),
        gxe.ExpectColumnValuesToBeInSet(column="unknown_tools", value_set=[0]),
        gxe.ExpectColumnValuesToBeInSet(column="replay_ok", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="communicate_ok", value_set=[True]),
    ]


def _qa_suite(gxe: Any, min_rows: int) -> list[Any]:
    return [
        gxe.ExpectTableRowCountToBeBetween(min_value=min_rows),
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        gxe.ExpectColumnValuesToBeBetween(column="question_chars", min_value=10),
        gxe.ExpectColumnValuesToBeBetween(column="answer_chars", min_value=1),
        gxe.ExpectColumnValuesToBeInSet(column="answer_type", value_set=list(ANSWER_TYPES)),
        gxe.ExpectColumnValuesToNotBeNull(column="category"),
        gxe.ExpectColumnValuesToBeInSet(column="numeric_ok", value_set=[True]),
    ]


def _describe(result: Any) -> str:
    cfg = result.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    res = result.result or {}
    detail = ""
    if res.get("unexpected_count"):
        detail = f": {res['unexpected_count']} unexpected, e.g. {res.get('partial_unexpected_list', [])[:5]}"
    elif "observed_value" in res:
        detail = f": observed {res['observed_value']}"
    return f"{cfg.type}({args}){detail}"


def run_suites(
    tables: dict[str, list[dict[str, Any]]],
    docs_dir: str | Path,
    *,
    min_tasks: int = 1,
    min_qa: int = 0,
    min_actions: int = 1,
    max_actions: int = 30,
    min_tasks_per_domain: int = 0,
) -> dict[str, SuiteReport]:
    """Validate the `tasks` and `qa` tables (each optional) and build Data Docs in `docs_dir`."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations as gxe
    import pandas as pd
    from great_expectations.data_context.types.base import ProgressBarsConfig

    docs_dir = Path(docs_dir).resolve()
    docs_dir.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    for site in list(ctx.get_config().data_docs_sites or {}):
        ctx.delete_data_docs_site(site)  # the default site writes to a temp folder we would leak
    ctx.add_data_docs_site(site_name="validation", site_config={
        "class_name": "SiteBuilder",
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
    })
    suites = {"tasks": _task_suite(gxe, min_tasks, min_actions, max_actions, min_tasks_per_domain),
              "qa": _qa_suite(gxe, min_qa)}
    reports: dict[str, SuiteReport] = {}
    source = ctx.data_sources.add_pandas("toolscale")
    for name, rows in tables.items():
        if name not in suites:
            raise ValueError(f"unknown table {name!r}; expected one of {sorted(suites)}")
        frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=_COLUMNS[name])
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("all")
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"{name}_suite"))
        for expectation in suites[name]:
            suite.add_expectation(expectation)
        definition = ctx.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch, suite=suite))
        checkpoint = ctx.checkpoints.add(gx.Checkpoint(
            name=f"{name}_checkpoint", validation_definitions=[definition], result_format="SUMMARY",
            actions=[gx.checkpoint.UpdateDataDocsAction(name="docs", site_names=["validation"])],
        ))
        run = checkpoint.run(batch_parameters={"dataframe": frame})
        results = [r for vr in run.run_results.values() for r in vr.results]
        reports[name] = SuiteReport(
            name=name, success=bool(run.success), evaluated=len(results),
            failures=[_describe(r) for r in results if not r.success],
            docs_index=str(docs_dir / "index.html"),
        )
    ctx.build_data_docs(site_names=["validation"])
    return reports


_COLUMNS = {
    "tasks": ["key", "domain", "id", "instructions_chars", "n_actions", "unknown_tools", "replay_ok",
              "domain_tasks", "communicate_ok"],
    "qa": ["id", "question_chars", "answer_chars", "answer_type", "category", "numeric_ok"],
}


def raise_on_failure(reports: dict[str, SuiteReport]) -> None:
    failures = [f"{name}: {f}" for name, rep in reports.items() for f in rep.failures]
    if failures:
        raise OrchestraError("validation suite failed:\n  " + "\n  ".join(failures))
