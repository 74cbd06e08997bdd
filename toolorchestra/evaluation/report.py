"""The evaluation report: a method x benchmark table (accuracy, cost, latency), a cost-accuracy
Pareto plot, and the files the `evaluate` stage writes.

`write_report(run, folder)` writes:

- `metrics.json`: task-list fingerprint, benchmarks, methods (with provenance), every metric per
  method x benchmark and `overall`, labels (strongest / cheapest expert), seconds per method;
- `per_task.jsonl`: one `TaskRecord` per episode, its judgement and full trajectory;
- `tasks.json`: the evaluated task list (identical for every method);
- `adherence.jsonl`: every preference intent checked, with instructed and neutral values and
  whether it was testable;
- `table.json`: the long-format table (one row per method x benchmark) logged to MLflow;
- `report.md`: the table as the paper prints it, plus notes;
- `pareto.png`: mean cost per task vs accuracy for each method, overall and per benchmark, with
  the Pareto front (no other method is both cheaper and at least as accurate) drawn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolorchestra.core.fs import atomic_write_bytes, atomic_write_json, atomic_write_jsonl, atomic_write_text
from toolorchestra.evaluation.benchmarks import task_list
from toolorchestra.evaluation.methods import CANDIDATE, mark_extremes
from toolorchestra.evaluation.metrics import Metrics, adherence_checks
from toolorchestra.evaluation.runner import EvalRun, method_rows


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Names on the cost-accuracy Pareto front (cost lower is better, accuracy higher is better),
    cheapest first.

    >>> pareto_front({"a": (1.0, 0.5), "b": (2.0, 0.4), "c": (3.0, 0.9), "d": (1.0, 0.2)})
    ['a', 'c']
    """
    front, best = [], float("-inf")
    for name, (cost, acc) in sorted(points.items(), key=lambda kv: (kv[1][0], -kv[1][1])):
        if acc > best:
            front.append(name)
            best = acc
    return front


def table_rows(run: EvalRun) -> list[dict[str, Any]]:
    labels = mark_extremes(run.summary, run.methods)
    roles = {m.name: m.role for m in run.methods}
    rows = []
    for method, per in run.summary.items():
        for bench, m in per.items():
            rows.append({"method": method, "role": roles.get(method, ""), "labels": ",".join(labels.get(method, [])),
                         "benchmark": bench, "n": m.n, "accuracy": m.accuracy, "cost_mean_usd": m.cost_mean,
                         "cost_total_usd": m.cost_total, "latency_mean_s": m.latency_mean,
                         "format_valid_rate": m.format_valid_rate, "answered_rate": m.answered_rate,
                         "adherence": m.adherence, "adherence_n": m.adherence_n,
                         "adherence_untestable": m.adherence_untestable, "llm_judged": m.llm_judged,
                         "calls_per_task": json.dumps(m.calls_per_task, sort_keys=True)})
    return rows


def _cell(m: Metrics | None) -> str:
    if m is None:
        return "-"
    return f"{100 * m.accuracy:.1f}% / ${m.cost_mean:.2g} / {m.latency_mean:.1f}s"


def markdown_table(run: EvalRun) -> str:
    labels = mark_extremes(run.summary, run.methods)
    benches = [b.name for b in run.benchmarks]
    head = ["method", *benches, "overall", "adherence", "format valid"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for method in run.methods:
        per = run.summary.get(method.name, {})
        overall = per.get("overall")
        tags = [method.role] + labels.get(method.name, [])
        name = f"{method.name} ({', '.join(tags)})"
        adherence = "-"
        if overall is not None and overall.adherence is not None:
            adherence = f"{100 * overall.adherence:.0f}% (n={overall.adherence_n})"
        if overall is not None and overall.adherence_untestable:
            adherence += f", {overall.adherence_untestable} untestable"
        valid = f"{100 * overall.format_valid_rate:.0f}%" if overall else "-"
        cells = [name, *(_cell(per.get(b)) for b in benches), _cell(overall), adherence, valid]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_report(run: EvalRun, *, title: str = "Evaluation", notes: list[str] | None = None) -> str:
    sizes = ", ".join(f"{b.name} ({b.kind}): {len(b.items)} tasks" for b in run.benchmarks)
    out = [
        f"# {title}",
        "",
        "Each cell: accuracy / mean cost per task (USD) / mean latency per task. Every method ran the "
        f"identical task list (fingerprint `{run.fingerprint}`): {sizes}.",
        "",
        markdown_table(run),
        "",
        "Methods:",
        "",
    ]
    out += [f"- `{m.name}` ({m.role}): {m.description or m.policy.model}" for m in run.methods]
    bench_notes = [f"{b.name}: {n}" for b in run.benchmarks for n in b.notes]
    if bench_notes or notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in [*bench_notes, *(notes or [])]]
    return "\n".join(out) + "\n"


def pareto_plot(run: EvalRun, path: Path, *, title: str = "Cost vs accuracy") -> Path:
    """Mean cost per task (x) vs accuracy (y), overall and per benchmark, front highlighted."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    panels = ["overall", *[b.name for b in run.benchmarks]]
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False)
    colors = {"candidate": "tab:red", "champion": "tab:purple", "orchestrator": "tab:blue", "expert": "tab:green",
              "random": "tab:gray"}
    roles = {m.name: m.role for m in run.methods}
    for ax, panel in zip(axes.flat, panels, strict=False):
        points = {name: (per[panel].cost_mean, per[panel].accuracy)
                  for name, per in run.summary.items() if panel in per}
        front = pareto_front(points)
        stacked: dict[tuple[float, float], int] = {}
        for name, (cost, acc) in points.items():
            ax.scatter(cost, acc, s=60, color=colors.get(roles.get(name, ""), "black"), zorder=3,
                       edgecolors="black" if name in front else "none")
            below = stacked.get((cost, acc), 0)  # methods on the same point: labels one under another
            stacked[(cost, acc)] = below + 1
            ax.annotate(name, (cost, acc), textcoords="offset points", xytext=(5, 4 - 10 * below), fontsize=8)
        if len(front) > 1:
            ax.plot([points[n][0] for n in front], [points[n][1] for n in front], "--", color="black", lw=1,
                    zorder=2, label="Pareto front")
            ax.legend(loc="lower right", fontsize=7)
        costs = [c for c, _ in points.values()]
        if costs and min(costs) > 0 and max(costs) / min(costs) > 50:
            ax.set_xscale("log")  # expert prices span orders of magnitude
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel("mean cost per task (USD)")
        ax.set_ylabel("accuracy")
        ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def metrics_document(run: EvalRun, **extra: Any) -> dict[str, Any]:
    return {
        "fingerprint": run.fingerprint,
        "benchmarks": [{"name": b.name, "kind": b.kind, "tasks": len(b.items), "notes": b.notes}
                       for b in run.benchmarks],
        "methods": method_rows(run),
        "labels": mark_extremes(run.summary, run.methods),
        "summary": {m: {b: v.model_dump(mode="json") for b, v in per.items()} for m, per in run.summary.items()},
        "seconds": run.seconds,
        "config": run.config.model_dump(mode="json"),
        **extra,
    }


def write_report(run: EvalRun, folder: Path, *, title: str = "Evaluation", notes: list[str] | None = None,
                 **extra: Any) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "metrics": atomic_write_json(folder / "metrics.json", metrics_document(run, **extra)),
        "per_task": atomic_write_jsonl(folder / "per_task.jsonl", [r.model_dump(mode="json") for r in run.records]),
        "tasks": atomic_write_json(folder / "tasks.json", task_list(run.benchmarks)),
        "adherence": atomic_write_jsonl(folder / "adherence.jsonl",
                                        adherence_checks(run.records, margin=run.config.adherence_margin)),
        "table": atomic_write_json(folder / "table.json", table_rows(run)),
        "report": atomic_write_text(folder / "report.md", markdown_report(run, title=title, notes=notes)),
    }
    files["pareto"] = pareto_plot(run, folder / "pareto.png", title=f"{title}: cost vs accuracy")
    return files


def headline_metrics(run: EvalRun, candidate: str = CANDIDATE) -> dict[str, float]:
    """The candidate's headline metrics and `eval/<method>/<benchmark>/<metric>` for every method."""
    out: dict[str, float] = {}
    for method, per in run.summary.items():
        for bench, metrics in per.items():
            for key in ("accuracy", "cost_mean", "latency_mean", "format_valid_rate"):
                out[f"eval/{method}/{bench}/{key}"] = float(getattr(metrics, key))
            if metrics.adherence is not None:
                out[f"eval/{method}/{bench}/adherence"] = float(metrics.adherence)
            if metrics.adherence_untestable:
                out[f"eval/{method}/{bench}/adherence_untestable"] = float(metrics.adherence_untestable)
        n = sum(1 for r in run.records if r.method == method)
        if run.seconds.get(method):
            out[f"eval/{method}/episodes_per_s"] = n / run.seconds[method]
    cand = run.summary[candidate]["overall"]
    out.update({"accuracy": cand.accuracy, "cost_mean": cand.cost_mean, "latency_mean": cand.latency_mean,
                "format_valid_rate": cand.format_valid_rate, "eval_tasks": float(cand.n)})
    if cand.adherence is not None:
        out["adherence"] = cand.adherence
    return out


def per_task_row(record: dict[str, Any]) -> dict[str, Any]:
    """A per-task result without its trajectory, for the table artifact (trajectories stay in
    `per_task.jsonl`)."""
    judgement = record.get("judgement") or {}
    return {"method": record["method"], "benchmark": record["benchmark"], "task_id": record["task_id"],
            "variant": record["variant"], "preference": record.get("preference_kind"),
            "correct": record["correct"], "judge": judgement.get("method"), "answered": record["answered"],
            "format_valid": record["format_valid"], "cost_usd": record["cost_usd"], "latency_s": record["latency_s"],
            "turns": record["turns"], "stop_reason": record.get("stop_reason"),
            "tool_calls": json.dumps(record.get("tool_calls") or {}, sort_keys=True)}
