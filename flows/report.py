"""Prefect artifacts and parent-run metrics summarising one flow run."""

from __future__ import annotations

import json
from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from stagekit.graph import StageOutcome
from stagekit.runner import stage_output
from toolorchestra.core.settings import Settings

# Metrics that earn their own table when a stage reports them (by prefix).
TABLES = {"filter": "filter-statistics", "eval": "evaluation-metrics"}


def mlflow_run_link(settings: Settings, run_id: str) -> str:
    from toolorchestra.core.services import redact_url  # a tracking URI may carry a password

    return f"`{run_id}` (experiment `{settings.mlflow.experiment}`, tracking `{redact_url(settings.tracking_uri)}`)"


def publish_summary(flow: str, outcomes: list[StageOutcome], parent_run_id: str, settings: Settings) -> None:
    import mlflow

    ran = [o for o in outcomes if o.ran]
    lines = [
        f"# {flow}: {len(ran)} stage(s) ran, {len(outcomes) - len(ran)} up to date",
        "",
        f"MLflow parent run: {mlflow_run_link(settings, parent_run_id)}",
        "",
        "| stage | status | seconds | key metrics |",
        "| --- | --- | --- | --- |",
    ]
    parent_metrics: dict[str, float] = {"stages_ran": float(len(ran)), "stages_skipped": float(len(outcomes) - len(ran))}
    for o in outcomes:
        shown = ", ".join(f"{k}={v:.4g}" for k, v in list(o.metrics.items())[:6])
        lines.append(f"| {o.stage} | {'ran' if o.ran else 'skipped'} | {o.seconds:.1f} | {shown} |")
        parent_metrics.update({f"{o.stage}.{k}": v for k, v in o.metrics.items()})
    mlflow.log_metrics(parent_metrics, run_id=parent_run_id)
    create_markdown_artifact(markdown="\n".join(lines), key=f"{flow}-summary", description=f"{flow} flow summary")
    for prefix, key in TABLES.items():
        rows = [
            {"stage": o.stage, "metric": k, "value": v}
            for o in outcomes for k, v in o.metrics.items() if k.startswith(prefix)
        ]
        if rows:
            create_table_artifact(table=rows, key=key, description=f"{flow}: {key}")
    publish_stage_reports(outcomes, settings)


def publish_stage_reports(outcomes: list[StageOutcome], settings: Settings) -> None:
    """The evaluation report (method x benchmark table + Pareto plot) and the promotion model card,
    as Prefect markdown artifacts, when those stages ran in this flow run."""
    ran = {o.stage for o in outcomes if o.ran}
    if "evaluate" in ran and (text := report_markdown(settings.workspace)):
        create_markdown_artifact(markdown=text, key="evaluation-report",
                                 description="orchestrator vs baselines: accuracy, cost, latency")
    if "promote" in ran and (text := card_markdown(settings.workspace)):
        create_markdown_artifact(markdown=text, key="promotion-decision",
                                 description="the gate's decision and the model card")


def report_markdown(workspace: Path, params_file: str = "params.yaml") -> str | None:
    """The evaluate stage's `report.md` with the Pareto plot embedded (a data URI), for a Prefect
    markdown artifact published by the flow; None when there is no report."""
    import base64

    folder = stage_output(workspace, "evaluate", "report", "reports/eval", params_file)
    if not (folder / "report.md").is_file():
        return None
    text = (folder / "report.md").read_text(encoding="utf-8")
    plot = folder / "pareto.png"
    if plot.is_file():
        text += f"\n![cost vs accuracy](data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()})\n"
    return text


def card_markdown(workspace: Path, params_file: str = "params.yaml") -> str | None:
    """The promotion's decision (one line) and model card, for a Prefect markdown artifact
    published by the flow; None when the stage has not written them."""
    folder = stage_output(workspace, "promote", "card", "reports/promote", params_file)
    if not (folder / "model_card.md").is_file() or not (folder / "decision.json").is_file():
        return None
    decision = json.loads((folder / "decision.json").read_text(encoding="utf-8"))
    version = decision["version"] or "(not registered)"
    if decision["decision"] == "rejected":  # say it plainly: the run succeeded, the model was not promoted
        head = f"**Not promoted** — {decision['registered_model']} version {version}" + (
            " stays `challenger`" if decision["version"] else "") + f". {_summary(decision)}"
    else:
        head = (f"**Gate: {decision['decision']}** — {decision['registered_model']} version {version}; "
                + ("; ".join(decision["reasons"]) or "no reasons recorded"))
    return head + "\n\n" + (folder / "model_card.md").read_text(encoding="utf-8")


def _summary(decision: dict) -> str:
    """The decision's one-line summary (a decision.json from before it had one: its reasons)."""
    return decision.get("summary") or "; ".join(decision.get("reasons") or []) or "no reasons recorded"


def promotion_line(workspace: Path, params_file: str = "params.yaml") -> tuple[bool, str] | None:
    """(promoted or identical, the plain one-line outcome) of the promote stage's decision.json,
    for the flow's log; None when there is none."""
    folder = stage_output(workspace, "promote", "card", "reports/promote", params_file)
    path = folder / "decision.json"
    if not path.is_file():
        return None
    decision = json.loads(path.read_text(encoding="utf-8"))
    version = f"version {decision['version']}" if decision.get("version") else "nothing registered"
    stays = ", it stays challenger" if decision["decision"] == "rejected" and decision.get("version") else ""
    return decision["decision"] != "rejected", f"promote: {_summary(decision)} ({version}{stays})"
