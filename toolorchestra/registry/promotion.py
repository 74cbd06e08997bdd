"""Promotion: from an evaluation report to a gate decision, a model card and version tags.

1. **plan** (`plan_promotion`): check the report evaluated this checkpoint (weights hash); find
   the current champion; read it, the candidate and the gate's `baselines` from the report, pooled
   over `gate.benchmarks`; decide with the gate (`toolorchestra.registry.gate`). A champion the
   report did not evaluate (it changed after the evaluation) refuses promotion with that reason; a
   champion with the same weights means nothing to promote. A baseline the report lacks is left
   out of the scores, and the gate fails its check with that reason. `Plan.summary` says the
   outcome in one plain line (what the stage logs and the flow reports);
2. what is recorded about the decision: `render_card` (the model card), `decision_record`
   (`decision.json`) and `version_tags` (the registered version's tags).

Registering and moving aliases is `toolorchestra.registry.store`; the `promote` stage wires both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.registry.gate import Decision, GateConfig, Scores, decide, paired_counts, pooled_scores


class PromotionConfig(BaseModel):
    """What the promotion compares and where it registers (the `promote` section of params.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registered_model: str = Field("orchestrator", min_length=1)
    candidate: str = Field("trained", description="the report's method that is the candidate")
    gate: GateConfig = GateConfig()
    dry_run: bool = False
    max_corpus_mb: float = Field(64.0, ge=0, description="local-search corpora up to this size travel with the model")


@dataclass
class Plan:
    decision: Decision
    candidate: Scores
    champion: Scores | None
    champion_version: str | None
    report: dict[str, Any]
    manifest: dict[str, Any]
    lock: dict[str, Any]
    identical_to: str | None = None
    """The champion's version when it already has the candidate's weights (nothing to register)."""
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "identical" if self.identical_to else self.decision.label

    @property
    def summary(self) -> str:
        """One plain line: `not promoted: trained 0.0% [0.0, 3.6] does not beat prompted ...`."""
        if self.identical_to:
            return self.notes[0] if self.notes else f"identical to champion version {self.identical_to}"
        return self.decision.summary


def read_report(folder: Path) -> dict[str, Any]:
    path = folder / "metrics.json"
    if not path.is_file():
        raise ConfigError(folder, "no metrics.json: run the evaluate stage first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg}") from None


def _read_lock(workspace: Path) -> dict[str, Any]:
    path = workspace / "dvc.lock"
    if not path.is_file():
        return {}
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError:
        return {}


def plan_promotion(params: PromotionConfig, *, model: Path, report_dir: Path, workspace: Path, settings: Settings) -> Plan:
    """Phase 1 (module docstring): everything the gate decides from; registers nothing."""
    from toolorchestra.registry.bundle import weights_sha256
    from toolorchestra.registry.store import CHAMPION, alias_version, client_for
    from toolorchestra.rl.checkpoint import read_manifest

    report = read_report(report_dir)
    summary = report.get("summary") or {}
    if params.candidate not in summary:
        raise ConfigError(report_dir / "metrics.json", f"no method {params.candidate!r} in the report; it has "
                          f"{sorted(summary)}", key="promote.candidate")
    sha = weights_sha256(model)
    if report.get("weights_sha256") and report["weights_sha256"] != sha:
        raise ConfigError(report_dir / "metrics.json", f"the report evaluated other weights than {model} "
                          "(weights hash differs): re-run the evaluate stage", key="weights_sha256")
    manifest = {**read_manifest(model), "weights_sha256": sha}
    try:
        candidate = pooled_scores(summary[params.candidate], params.gate.benchmarks)
    except KeyError as exc:
        raise ConfigError(None, str(exc.args[0]), key="promote.gate.benchmarks") from None
    baselines = _baseline_scores(summary, params.gate)
    current = alias_version(client_for(settings), params.registered_model, CHAMPION)
    evaluated = report.get("champion") or {}
    lock = _read_lock(workspace)
    if current is not None and current.tags.get("orchestra.weights_sha256") == sha:
        decision = Decision(promote=False, checks=[])
        return Plan(decision, candidate, None, str(current.version), report, manifest, lock,
                    identical_to=str(current.version),
                    notes=[f"the champion (version {current.version}) already has these weights: nothing to promote"])
    if current is None:
        decision = decide(candidate, None, params.gate, baselines=baselines, name=params.candidate,
                          paired=paired_counts(report, params.candidate))
        return Plan(decision, candidate, None, None, report, manifest, lock)
    if str(evaluated.get("version")) != str(current.version) or evaluated.get("method") not in summary:
        from toolorchestra.registry.gate import Check

        seen = f"version {evaluated['version']}" if evaluated.get("version") else "no champion"
        decision = Decision(promote=False, checks=[Check(
            name="same_evaluation", passed=False,
            reason=(f"the champion is version {current.version} but the evaluation compared against {seen}: "
                    "re-run the evaluate stage (orchestra run --force evaluate)"))])
        return Plan(decision, candidate, None, str(current.version), report, manifest, lock)
    champion = pooled_scores(summary[evaluated["method"]], params.gate.benchmarks)
    decision = decide(candidate, champion, params.gate, baselines=baselines, name=params.candidate,
                      paired=paired_counts(report, params.candidate))
    return Plan(decision, candidate, champion, str(current.version), report, manifest, lock)


def _baseline_scores(summary: dict[str, Any], gate: GateConfig) -> dict[str, Scores]:
    """The gate's baselines that the report evaluated (on every benchmark the gate reads); the
    gate refuses, with the reason, when one is missing."""
    out = {}
    for name in [*gate.baselines, *gate.not_worse_than]:
        if name not in summary:
            continue
        try:
            out[name] = pooled_scores(summary[name], gate.benchmarks)
        except KeyError:
            continue  # evaluated on fewer benchmarks than the gate reads: counts as missing
    return out


def render_card(params: PromotionConfig, plan: Plan, *, version: str | None, run_id: str | None) -> str:
    from toolorchestra.registry.card import model_card

    champion = plan.report.get("champion") if plan.champion is not None else None
    return model_card(name=params.registered_model, version=version, run_id=run_id, manifest=plan.manifest,
                      decision=plan.decision, gate=params.gate, report=plan.report, candidate=params.candidate,
                      champion=champion, lock=plan.lock, extra_limits=plan.notes)


def decision_record(params: PromotionConfig, plan: Plan, version: str | None) -> dict[str, Any]:
    return {
        "decision": plan.label, "promoted": plan.decision.promote, "summary": plan.summary,
        "reasons": plan.decision.reasons + plan.notes,
        "checks": [c.model_dump() for c in plan.decision.checks],
        "version": version, "registered_model": params.registered_model,
        "champion_version_before": plan.champion_version, "candidate": plan.candidate.model_dump(),
        "champion": plan.champion.model_dump() if plan.champion else None, "gate": params.gate.model_dump(),
        "fingerprint": plan.report.get("fingerprint"), "weights_sha256": plan.manifest["weights_sha256"],
        "dry_run": params.dry_run,
    }


def version_tags(params: PromotionConfig, plan: Plan) -> dict[str, str]:
    c = plan.candidate
    return {
        "orchestra.gate.decision": plan.label,
        "orchestra.gate.summary": plan.summary,
        "orchestra.gate.reasons": " | ".join(plan.decision.reasons + plan.notes),
        "orchestra.gate.champion_version": plan.champion_version or "none",
        "orchestra.gate.config": json.dumps(params.gate.model_dump(), sort_keys=True),
        "orchestra.eval.fingerprint": str(plan.report.get("fingerprint")),
        "orchestra.eval.accuracy": f"{c.accuracy:.6g}",
        "orchestra.eval.accuracy_ci95": f"[{c.accuracy_ci_low:.6g}, {c.accuracy_ci_high:.6g}]",
        "orchestra.eval.cost_mean": f"{c.cost_mean:.6g}",
        "orchestra.eval.latency_mean": f"{c.latency_mean:.6g}", "orchestra.eval.tasks": str(c.n),
        "orchestra.weights_sha256": plan.manifest["weights_sha256"],
    }
