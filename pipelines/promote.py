"""Stage `promote`: register the trained orchestrator, set `challenger`, and move `champion` only
through the gate.

Inputs (`deps`): `model` (the checkpoint, `models/orchestrator`) and `report` (the `evaluate`
stage's folder, `reports/eval`, which holds the candidate and the re-evaluated champion on the
same tasks). Registry state (the current `champion`) is read from MLflow.

Phases:
1. **plan** (`toolorchestra.registry.promotion.plan_promotion`): check the report evaluated this
   checkpoint, find the current champion, decide with the gate;
2. **register**: log the model (transformers weights + the pyfunc that runs the whole loop with its
   catalog) in this stage's MLflow run, register a new version of `registered_model`, set
   `challenger` on it, and `champion` when the gate passed;
3. **record**: the decision, reasons and metrics as version tags, the model card as the version's
   description and as the run artifact `model_card.md`.

Output (`outs.card`, `reports/promote/`): `model_card.md`, `decision.json` (with `summary`, the
decision in one plain line). `dry_run: true` (or `orchestra promote --dry-run`) plans and writes the
card but registers nothing and moves no alias.

A refused candidate is not an error: the stage succeeds, the version stays `challenger`, and the
stage logs (as a warning) and records why in plain words, e.g. `not promoted: trained 0.0% [0.0,
3.7] on 100 tasks ...; trained 0.0% [0.0, 3.7] does not beat prompted 2.0% [0.6, 7.0] ...`.
"""

from __future__ import annotations

import logging

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.fs import atomic_write_json, atomic_write_text
from toolorchestra.registry.promotion import PromotionConfig, decision_record, plan_promotion, render_card, version_tags

log = logging.getLogger(__name__)


class Params(StageParams, PromotionConfig):
    REQUIRED_DEPS = {"model": "models/orchestrator", "report": "reports/eval"}
    REQUIRED_OUTS = {"card": "reports/promote"}


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    import mlflow

    from toolorchestra.registry.store import (
        CHALLENGER,
        CHAMPION,
        client_for,
        log_orchestrator,
        record_decision,
        set_alias,
    )

    settings = paths.settings
    plan = plan_promotion(params, model=paths.deps["model"], report_dir=paths.deps["report"],
                          workspace=paths.workspace, settings=settings)
    active = mlflow.active_run()
    version: str | None = None
    if not params.dry_run and plan.identical_to is None:
        client = client_for(settings)
        registered = log_orchestrator(paths.deps["model"], name=params.registered_model, settings=settings,
                                      tags={"orchestra.weights_sha256": plan.manifest["weights_sha256"]})
        version = str(registered.version)
        set_alias(client, params.registered_model, CHALLENGER, version)
        if plan.decision.promote:
            set_alias(client, params.registered_model, CHAMPION, version)
        card = render_card(params, plan, version=version, run_id=active.info.run_id if active else None)
        record_decision(client, params.registered_model, version, tags=version_tags(params, plan), card=card)
    else:
        card = render_card(params, plan, version=None, run_id=active.info.run_id if active else None)
    where = f"version {version}" if version else "nothing registered"
    if plan.decision.promote or plan.identical_to:
        log.info("%s (%s)", plan.summary, where)
    else:
        log.warning("%s (%s%s)", plan.summary, where, ", it stays challenger" if version else "")
    out = paths.outs["card"]
    atomic_write_text(out / "model_card.md", card)
    atomic_write_json(out / "decision.json", decision_record(params, plan, version))
    if active is not None:
        mlflow.log_text(card, "model_card.md")
        mlflow.log_dict(decision_record(params, plan, version), "decision.json")
        mlflow.set_tags({"orchestra.gate.decision": plan.label, "orchestra.registered_version": version or "none"})
    metrics = {"promoted": float(plan.decision.promote and version is not None),
               "gate_passed": float(plan.decision.promote), "registered": float(version is not None),
               "candidate_accuracy": plan.candidate.accuracy, "candidate_cost_mean": plan.candidate.cost_mean,
               "identical_to_champion": float(plan.identical_to is not None)}
    if version is not None:
        metrics["version"] = float(version)
    if plan.champion is not None:
        metrics["champion_accuracy"] = plan.champion.accuracy
        metrics["champion_cost_mean"] = plan.champion.cost_mean
    return metrics
