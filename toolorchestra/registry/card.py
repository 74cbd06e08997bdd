"""The model card: a markdown page on each registered version (its description) and a run artifact.

Sections: the gate's decision in one line and every check's reason (with its figures and
intervals); the model (base model, training steps, policy alias, weights hash, MLflow run, lineage
command); data versions (every stage's outputs and their md5 from `dvc.lock`); parameters (the
stages' parameters as `dvc.lock` recorded them, and the gate's); the evaluation (method x metrics,
task-list fingerprint); the candidate versus the gate's baselines; the candidate paired with its
warm start and the champion on the same episodes (right only for one of the two, exact McNemar p);
versus the previous champion on the same evaluation; known limits (general ones and those this evaluation shows). Accuracy and
adherence are shown with their 95% Wilson intervals (`55.0% [34.2, 74.2]`), read from the report
or, for a report that lacks them, computed from the rate and its count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolorchestra.evaluation.metrics import proportion_interval
from toolorchestra.registry.gate import Decision, GateConfig, paired_counts

GENERAL_LIMITS = (
    "Tool-use tasks are given up front; there is no simulated user (tau2-bench's dual control), and "
    "ENV_ASSERTION / NL_ASSERTION criteria are not scored.",
    "Latency is wall time on the evaluation machine, with episodes generated in batches; compare it only "
    "within one evaluation.",
    "Costs come from the catalog's prices, not from provider invoices.",
)


def data_versions(lock: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every stage output `dvc.lock` records: stage, path, md5, files."""
    rows = []
    for stage, entry in sorted((lock.get("stages") or {}).items()):
        for out in entry.get("outs") or []:
            rows.append({"stage": stage, "path": out.get("path"), "md5": out.get("md5") or out.get("etag"),
                         "files": out.get("nfiles")})
    return rows


def stage_params(lock: Mapping[str, Any],
                 stages: tuple[str, ...] = ("train", "preferences", "evaluate")) -> dict[str, Any]:
    """The parameters each named stage ran with, as `dvc.lock` recorded them."""
    out = {}
    for stage in stages:
        entry = (lock.get("stages") or {}).get(stage) or {}
        for values in (entry.get("params") or {}).values():
            out.update({k: v for k, v in values.items()} if isinstance(values, dict) else {})
    return out


def _interval(m: Mapping[str, Any], metric: str, count: str) -> tuple[float, float]:
    """The 95% Wilson interval of `metric` (accuracy or adherence) of one metrics entry: the one
    the report stored, else computed from the rate and its count (`n`, `adherence_n`)."""
    low, high = m.get(f"{metric}_ci_low"), m.get(f"{metric}_ci_high")
    if low is not None and high is not None:
        return float(low), float(high)
    return proportion_interval(m.get(metric), int(m.get(count) or 0))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _pct_ci(m: Mapping[str, Any], metric: str = "accuracy", count: str = "n") -> str:
    """`55.0% [34.2, 74.2]`; `-` when the metric is absent."""
    if m.get(metric) is None:
        return "-"
    low, high = _interval(m, metric, count)
    return f"{100 * m[metric]:.1f}% [{100 * low:.1f}, {100 * high:.1f}]"


def evaluation_limits(report: Mapping[str, Any], candidate: str) -> list[str]:
    """Limits this evaluation shows: sample size, judge, held-out notes, bundled corpora."""
    out = []
    overall = report["summary"][candidate]["overall"]
    n = int(overall["n"])
    out.append(f"Evaluated on {n} tasks: accuracy {_pct_ci(overall)} (95% Wilson interval); a difference "
               "smaller than that interval is not evidence of a better model.")
    judge = (report.get("judge") or {}).get("model")
    if not judge:
        out.append("QA answers were judged by exact / numeric match only (no LLM judge configured): correct "
                   "paraphrases count as wrong.")
    for bench in report.get("benchmarks", []):
        for note in bench.get("notes") or []:
            out.append(f"{bench['name']}: {note}")
    if not report.get("train_set_known", True):
        out.append("The training set was not given to the evaluation: held-out tasks were re-derived from the "
                   "assembly's split, not checked against what training used.")
    return out


def paired_lines(report: Mapping[str, Any], candidate: str, champion: Mapping[str, Any] | None) -> list[str]:
    """The candidate paired with its warm start (`sft_only`: what GRPO moved) and with the champion
    on the same episodes, from the report's `paired` when it pairs this candidate (`paired_with`;
    none for a report written before it)."""
    paired = paired_counts(report, candidate) or {}
    shown = [m for m in ("sft_only", (champion or {}).get("method")) if m and m in paired]
    if not shown:
        return []
    lines = ["", "## Paired on the same episodes", "",
             "| method | right only for the candidate | right only for the method | exact McNemar p |",
             "| --- | --- | --- | --- |"]
    for method in shown:
        p = paired[method]
        lines.append(f"| {method} | {p['first_only']} | {p['second_only']} | {p['p_value']:.2g} |")
    return lines


def model_card(
    *,
    name: str,
    version: str | None,
    run_id: str | None,
    manifest: Mapping[str, Any],
    decision: Decision,
    gate: GateConfig,
    report: Mapping[str, Any],
    candidate: str,
    champion: Mapping[str, Any] | None,
    lock: Mapping[str, Any],
    extra_limits: list[str] | None = None,
) -> str:
    """The card as markdown (see the module docstring). `champion` is `{"method", "version"}` or None."""
    from toolorchestra.rl.select import exported

    title = f"{name} v{version}" if version else f"{name} (candidate, not registered)"
    verdict = {True: "**promoted to champion**", False: "**kept as challenger (not promoted)**"}[decision.promote]
    lines = [f"# {title}", "", f"Gate decision: {verdict}", "", decision.summary, ""]
    lines += [f"- {r}" for r in decision.reasons]
    steps = manifest.get("steps") or {}
    lines += ["", "## Model", "",
              f"- base model: `{manifest.get('base_model')}`" + (f", initialised from `{manifest['init_from']}`"
                                                                if manifest.get("init_from") else ""),
              f"- training: backend `{manifest.get('backend')}`, SFT steps {steps.get('sft', 0)}, GRPO steps "
              f"{steps.get('grpo', 0)}, {manifest.get('instances', '?')} training instances",
              *([f"- checkpoint choice (validation split, {manifest['selection']['n']} tasks): "
                 f"{exported(manifest['selection'])}: {manifest['selection']['reason']}"]
                if manifest.get("selection") else []),
              f"- policy prices: catalog model `{manifest.get('policy_alias')}`",
              f"- weights sha256: `{manifest.get('weights_sha256', '?')}`",
              f"- MLflow run: `{run_id}`; lineage: `orchestra lineage models:/{name}/{version}`" if version else
              f"- MLflow run: `{run_id}`"]
    versions = data_versions(lock)
    lines += ["", "## Data versions (dvc.lock)", ""]
    if versions:
        lines += ["| stage | output | md5 |", "| --- | --- | --- |"]
        lines += [f"| {v['stage']} | `{v['path']}` | `{v['md5']}` |" for v in versions]
    else:
        lines.append("No dvc.lock: the data versions are unknown (run through `orchestra run`).")
    params = stage_params(lock)
    lines += ["", "## Parameters", "",
              "Gate: " + ", ".join(f"{k}={v}" for k, v in gate.model_dump().items()) + "."]
    if params:
        shown = json.dumps(params, sort_keys=True, default=str)
        lines += ["", "Stages (dvc.lock): `" + (shown if len(shown) <= 1200 else shown[:1200] + " ...") + "`"]
    summary = report["summary"]
    lines += ["", "## Evaluation", "",
              f"Task list fingerprint `{report.get('fingerprint')}`; "
              + ", ".join(f"{b['name']} ({b['tasks']} tasks)" for b in report.get("benchmarks", [])) + ".", "",
              "| method | accuracy [95% CI] | mean cost | mean latency | adherence [95% CI] |",
              "| --- | --- | --- | --- | --- |"]
    labels = report.get("labels") or {}
    for method, per in summary.items():
        o = per["overall"]
        tag = " (" + ", ".join(labels[method]) + ")" if labels.get(method) else ""
        mark = " **candidate**" if method == candidate else ""
        lines.append(f"| {method}{tag}{mark} | {_pct_ci(o)} | ${o['cost_mean']:.3g} | "
                     f"{o['latency_mean']:.2f}s | {_pct_ci(o, 'adherence', 'adherence_n')} |")
    lines += ["", "## Versus the baselines", ""]
    if gate.baselines:
        checks = {c.name: c for c in decision.checks}
        lines += [f"Every promotion must beat these on accuracy (rule `{gate.rule}`, margin "
                  f"{100 * gate.min_margin:.1f} pts).", "",
                  "| baseline | accuracy [95% CI] | candidate minus baseline | gate |", "| --- | --- | --- | --- |"]
        c = summary[candidate]["overall"]
        for name in gate.baselines:
            check = checks.get(f"beats:{name}")
            verdict = "-" if check is None else ("passed" if check.passed else "**failed**")
            if name in summary:
                b = summary[name]["overall"]
                lines.append(f"| {name} | {_pct_ci(b)} | {100 * (c['accuracy'] - b['accuracy']):+.1f} pts | "
                             f"{verdict} |")
            else:
                lines.append(f"| {name} | not evaluated | - | {verdict} |")
    else:
        lines.append("The gate names no baselines (promote.gate.baselines is empty).")
    lines += paired_lines(report, candidate, champion)
    lines += ["", "## Versus the previous champion", ""]
    if champion and champion.get("method") in summary:
        c, p = summary[candidate]["overall"], summary[champion["method"]]["overall"]
        lines += [f"Champion: version {champion.get('version')}, re-evaluated on the same tasks.", "",
                  "| metric | candidate | champion | change |", "| --- | --- | --- | --- |",
                  f"| accuracy | {_pct_ci(c)} | {_pct_ci(p)} | "
                  f"{100 * (c['accuracy'] - p['accuracy']):+.1f} pts |",
                  f"| mean cost | ${c['cost_mean']:.3g} | ${p['cost_mean']:.3g} | "
                  + (f"x{c['cost_mean'] / p['cost_mean']:.2f} |" if p["cost_mean"] > 0 else "- |"),
                  f"| mean latency | {c['latency_mean']:.2f}s | {p['latency_mean']:.2f}s | "
                  f"{c['latency_mean'] - p['latency_mean']:+.2f}s |"]
    else:
        lines.append("No previous champion: this is the first promotion decision.")
    limits = [*evaluation_limits(report, candidate), *(extra_limits or []), *GENERAL_LIMITS]
    lines += ["", "## Known limits", ""] + [f"- {limit}" for limit in limits]
    return "\n".join(lines) + "\n"
