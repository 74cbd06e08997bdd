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
- `report.md`: the table as the paper prints it (each accuracy and adherence with its 95% Wilson
  interval, `41.0% [31.9, 50.8]`), where each method's calls went (share per tool and per expert
  model), each method's solved episodes and first calls per task category, the candidate paired
  with every other method on the same episodes (episodes only one solved, exact McNemar p: for
  `sft_only` that is what GRPO moved), plus notes;
- `pareto.png`: mean cost per task vs accuracy for each method, overall and per benchmark, with
  the Pareto front (no other method is both cheaper and at least as accurate) drawn. Methods on
  the same or nearly the same point share one label listing their names, and labels are placed
  so that no two overlap (`place_labels`).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from toolorchestra.core.fs import atomic_write_bytes, atomic_write_json, atomic_write_jsonl, atomic_write_text
from toolorchestra.evaluation.benchmarks import task_list
from toolorchestra.evaluation.methods import CANDIDATE, mark_extremes
from toolorchestra.evaluation.metrics import Metrics, Paired, TaskRecord, adherence_checks, paired_outcomes
from toolorchestra.evaluation.runner import EvalRun, method_rows

_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_\-. ]")


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
                         "cost_total_usd": m.cost_total, "cost_per_correct_usd": m.cost_per_correct,
                         "latency_mean_s": m.latency_mean,
                         "format_valid_rate": m.format_valid_rate, "answered_rate": m.answered_rate,
                         "accuracy_ci_low": m.accuracy_ci_low, "accuracy_ci_high": m.accuracy_ci_high,
                         "adherence": m.adherence, "adherence_n": m.adherence_n,
                         "adherence_ci_low": m.adherence_ci_low, "adherence_ci_high": m.adherence_ci_high,
                         "adherence_untestable": m.adherence_untestable, "llm_judged": m.llm_judged,
                         "calls_per_task": json.dumps(m.calls_per_task, sort_keys=True),
                         "tool_share": json.dumps(m.tool_share, sort_keys=True),
                         "model_share": json.dumps(m.model_share, sort_keys=True)})
    return rows


def with_interval(p: float, low: float, high: float, digits: int = 1) -> str:
    """A proportion and its interval in percent.

    >>> with_interval(0.41, 0.3187, 0.5080)
    '41.0% [31.9, 50.8]'
    """
    return f"{100 * p:.{digits}f}% [{100 * low:.{digits}f}, {100 * high:.{digits}f}]"


def _cell(m: Metrics | None) -> str:
    if m is None:
        return "-"
    accuracy = with_interval(m.accuracy, m.accuracy_ci_low, m.accuracy_ci_high)
    return f"{accuracy} / ${m.cost_mean:.2g} / {m.latency_mean:.1f}s"


def _shares_cell(shares: dict[str, float], total: int) -> str:
    if not total:
        return "-"
    return ", ".join(f"{name} {100 * share:.0f}%" for name, share in shares.items()) + f" (of {total})"


def call_shares_table(run: EvalRun) -> str:
    """Where each method's calls went, pooled over all benchmarks: its share of calls per tool and
    per expert model (a policy that collapsed onto one tool shows ~100% on it)."""
    lines = ["| method | calls per task | share of calls per tool | share of expert-model calls |",
             "| --- | --- | --- | --- |"]
    for method in run.methods:
        overall = run.summary.get(method.name, {}).get("overall")
        if overall is None:
            continue
        per_task = f"{overall.calls_total / overall.n:.2f}" if overall.n else "-"
        lines.append(f"| {method.name} | {per_task} | {_shares_cell(overall.tool_share, overall.calls_total)} | "
                     f"{_shares_cell(overall.model_share, overall.model_calls_total)} |")
    return "\n".join(lines)


def by_category(run: EvalRun) -> dict[str, dict[str, list[TaskRecord]]]:
    """Each method's scored episodes per task category (a QA item's category, `tool_use` for a
    ticket), pooled over the benchmarks, in the order the methods ran."""
    grouped: dict[str, dict[str, list[TaskRecord]]] = {}
    for record in run.records:
        if record.scored:
            grouped.setdefault(record.method, {}).setdefault(record.category or record.kind, []).append(record)
    return {m.name: grouped[m.name] for m in run.methods if m.name in grouped}


def category_table(run: EvalRun, *, top: int = 3) -> str:
    """Each method's solved / scored episodes per task category, with where its first calls went:
    a method that routes one category to the wrong tool shows it (counts sent to `local_search`,
    tickets called with another tool's arguments)."""
    groups = by_category(run)
    categories = sorted({c for per in groups.values() for c in per})
    lines = ["| method | " + " | ".join(categories) + " |", "|" + " --- |" * (len(categories) + 1)]
    for method, per in groups.items():
        cells = []
        for category in categories:
            mine = per.get(category, [])
            if not mine:
                cells.append("-")
                continue
            firsts = Counter(r.first_call for r in mine).most_common()
            shown = ", ".join(f"{tool} {n}" for tool, n in firsts[:top])
            if len(firsts) > top:
                shown += f", {len(firsts) - top} more"
            cells.append(f"{sum(r.correct for r in mine)}/{len(mine)} ({shown})")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    guesses = [constant_guess(next(iter(groups.values()), {}).get(c, [])) for c in categories]
    if any(guesses):
        lines.append("| one answer for all | " + " | ".join(g or "-" for g in guesses) + " |")
    return "\n".join(lines)


def constant_guess(records: list[TaskRecord]) -> str | None:
    """What answering every item of a category with its most common gold answer would solve
    ("9/14 ('1')"), None when the items have no gold answers (tickets). Every method ran the same
    items, so one method's records give it: the floor a policy that answers without reading gets
    (the 2026-12-07 demo's counts: 9 of 14 were 1, so a failed program followed by "1" scored)."""
    golds = [str(r.judgement.get("details", {}).get("gold", "")).strip() for r in records]
    if not golds or not all(golds):
        return None
    value, n = Counter(golds).most_common(1)[0]
    return f"{n}/{len(golds)} ('{value[:20]}')"


def paired(run: EvalRun, candidate: str = CANDIDATE) -> dict[str, Paired]:
    """The candidate against every other method on the same scored episodes (empty when the run
    has no candidate)."""
    if candidate not in run.summary:
        return {}
    out = {m.name: paired_outcomes(run.records, candidate, m.name) for m in run.methods if m.name != candidate}
    return {name: result for name, result in out.items() if result is not None}


def paired_table(pairs: dict[str, Paired], candidate: str = CANDIDATE) -> str:
    """`paired`'s result as a table: for the SFT-only checkpoint it says what GRPO moved, in episodes."""
    lines = [f"| method | right only for {candidate} | right only for the method | both | neither | exact McNemar p |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, result in pairs.items():
        lines.append(f"| {name} | {result.first_only} | {result.second_only} | {result.both} | {result.neither} | "
                     f"{result.p_value:.2g} |")
    return "\n".join(lines)


def markdown_table(run: EvalRun) -> str:
    labels = mark_extremes(run.summary, run.methods)
    benches = [b.name for b in run.benchmarks]
    head = ["method", *benches, "overall", "cost per correct task", "adherence", "format valid"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for method in run.methods:
        per = run.summary.get(method.name, {})
        overall = per.get("overall")
        tags = [method.role] + labels.get(method.name, [])
        name = f"{method.name} ({', '.join(tags)})"
        adherence = "-"
        if overall is not None and overall.adherence is not None:
            low, high = overall.adherence_ci_low, overall.adherence_ci_high
            adherence = (with_interval(overall.adherence, low, high, digits=0) if low is not None and high is not None
                         else f"{100 * overall.adherence:.0f}%") + f" (n={overall.adherence_n})"
        if overall is not None and overall.adherence_untestable:
            adherence += f", {overall.adherence_untestable} untestable"
        valid = f"{100 * overall.format_valid_rate:.0f}%" if overall else "-"
        per_correct = "-" if overall is None else (f"${overall.cost_per_correct:.2g}"
                                                   if overall.cost_per_correct is not None else "- (none correct)")
        cells = [name, *(_cell(per.get(b)) for b in benches), _cell(overall), per_correct, adherence, valid]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown_report(run: EvalRun, *, title: str = "Evaluation", notes: list[str] | None = None) -> str:
    sizes = ", ".join(f"{b.name} ({b.kind}): {len(b.items)} tasks" for b in run.benchmarks)
    out = [
        f"# {title}",
        "",
        "Each cell: accuracy [95% Wilson interval] / mean cost per task (USD) / mean latency per task. "
        f"Every method ran the identical task list (fingerprint `{run.fingerprint}`): {sizes}.",
        "",
        markdown_table(run),
        "",
        "Where the calls went (all benchmarks): each tool's share of the method's tool calls, and each "
        "expert model's share of the calls that reached an expert model.",
        "",
        call_shares_table(run),
        "",
        "By task category (all benchmarks): solved / scored episodes, then each episode's first call "
        "(`(answer)`: the first turn answered without a call); the last row, what answering every item "
        "of a category with its most common gold answer would solve.",
        "",
        category_table(run),
        "",
    ]
    pairs = paired(run)
    if pairs:
        out += [
            f"Paired with the candidate (`{CANDIDATE}`) on the same scored episodes: episodes only one of the two "
            "solved, and the exact McNemar test of those (two-sided).",
            "",
            paired_table(pairs),
            "",
        ]
    out += [
        "Methods:",
        "",
    ]
    out += [f"- `{m.name}` ({m.role}): {m.description or m.policy.model}" for m in run.methods]
    bench_notes = [f"{b.name}: {n}" for b in run.benchmarks for n in b.notes]
    if bench_notes or notes:
        out += ["", "Notes:", ""] + [f"- {n}" for n in [*bench_notes, *(notes or [])]]
    return "\n".join(out) + "\n"


def _near_groups(display: list[tuple[float, float]], near_px: float) -> list[list[int]]:
    """Indices of points grouped by single linkage: a point within `near_px` pixels of a group
    joins it (points one cannot tell apart on the plot get one label)."""
    parent = list(range(len(display)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, (xi, yi) in enumerate(display):
        for j in range(i):
            xj, yj = display[j]
            if (xi, yi) == (xj, yj) or math.hypot(xi - xj, yi - yj) <= near_px:
                parent[root(i)] = root(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(display)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _candidate_offsets() -> list[tuple[float, float, str, str]]:
    """Label offsets (points) around an anchor, nearest first, with the alignment that keeps the
    text on that side of the anchor."""
    out = []
    for radius in (6, 14, 24, 36, 50, 66, 84, 104, 126):
        for degrees in (45, 0, -45, 90, -90, 135, 180, -135, 22, -22, 158, -158):
            dx, dy = radius * math.cos(math.radians(degrees)), radius * math.sin(math.radians(degrees))
            ha = "left" if dx > 0.3 * radius else "right" if dx < -0.3 * radius else "center"
            va = "bottom" if dy > 0.3 * radius else "top" if dy < -0.3 * radius else "center"
            out.append((dx, dy, ha, va))
    return out


def _area(a: Any, b: Any) -> float:
    from matplotlib.transforms import Bbox

    both = Bbox.intersection(a, b)
    return 0.0 if both is None else both.width * both.height


def place_labels(ax: Any, points: dict[str, tuple[float, float]], *, fontsize: float = 8, near_px: float = 10.0,
                 per_line: int = 2) -> list[Any]:
    """Label the points of `ax` so that no two labels overlap; returns the annotations.

    Points closer than `near_px` pixels (identical ones included: several methods at cost 0 and
    accuracy 0) get one label listing their names. Each label then takes the nearest offset
    around its point whose box overlaps no label placed before it (and, where possible, no marker,
    no legend and nothing outside the axes); a label moved far from its point gets a thin leader
    line. The axes' limits and layout must be final: the boxes are measured in pixels. (adjustText
    is not a dependency; this greedy placement is enough for a dozen methods.)"""
    import numpy as np

    if not points:
        return []
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    names = list(points)
    display = [tuple(float(v) for v in ax.transData.transform(points[n])) for n in names]
    frame = ax.get_window_extent(renderer)
    from matplotlib.transforms import Bbox

    markers = [Bbox.from_bounds(x - 4, y - 4, 8, 8) for x, y in display if np.isfinite(x) and np.isfinite(y)]
    legend = ax.get_legend()
    obstacles = markers + ([legend.get_window_extent(renderer)] if legend is not None else [])
    groups = sorted(_near_groups(display, near_px), key=lambda g: (-display[g[0]][1], display[g[0]][0]))
    placed: list[Any] = []
    out = []
    for group in groups:
        members = [names[i] for i in group]
        text = ",\n".join(", ".join(members[k:k + per_line]) for k in range(0, len(members), per_line))
        anchor = points[members[0]]
        ann = ax.annotate(text, anchor, textcoords="offset points", xytext=(5, 4), fontsize=fontsize,
                          annotation_clip=False, zorder=4)
        best: tuple[float, tuple[float, float, str, str]] | None = None
        for offset in _candidate_offsets():
            dx, dy, ha, va = offset
            ann.xyann = (dx, dy)
            ann.set_horizontalalignment(ha)
            ann.set_verticalalignment(va)
            box = ann.get_window_extent(renderer).padded(2)
            clash = sum(_area(box, other) for other in placed)
            if clash > 0:
                continue  # never on another label
            inside = _area(box, frame)
            cost = sum(_area(box, other) for other in obstacles) + (box.width * box.height - inside)
            if best is None or cost < best[0]:
                best = (cost, offset)
            if cost == 0:
                break
        if best is None:  # no free spot in reach (hundreds of labels): keep the first, overlapping
            best = (0.0, _candidate_offsets()[0])
        dx, dy, ha, va = best[1]
        ann.xyann = (dx, dy)
        ann.set_horizontalalignment(ha)
        ann.set_verticalalignment(va)
        box = ann.get_window_extent(renderer)
        placed.append(box.padded(2))
        if math.hypot(dx, dy) > 14:  # away from its point: a leader line to the box's nearest corner
            x0, y0 = ax.transData.transform(anchor)
            cx = min(max(x0, box.x0), box.x1)
            cy = min(max(y0, box.y0), box.y1)
            end = ax.transData.inverted().transform((cx, cy))
            ax.plot([anchor[0], end[0]], [anchor[1], end[1]], "-", color="0.3", lw=0.7, zorder=2,
                    scalex=False, scaley=False)
        out.append(ann)
    return out


PARETO_DPI = 110


def pareto_figure(run: EvalRun, *, title: str = "Cost vs accuracy") -> Any:
    """The figure `pareto_plot` saves: mean cost per task (x) vs accuracy (y), overall and per
    benchmark, front highlighted, labels placed by `place_labels`."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    panels = ["overall", *[b.name for b in run.benchmarks]]
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    # the dpi the file is saved at: labels are placed in pixels
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.2 * rows), squeeze=False, dpi=PARETO_DPI)
    colors = {"candidate": "tab:red", "champion": "tab:purple", "orchestrator": "tab:blue", "expert": "tab:green",
              "random": "tab:gray"}
    roles = {m.name: m.role for m in run.methods}
    panel_points = []
    for ax, panel in zip(axes.flat, panels, strict=False):
        points = {name: (per[panel].cost_mean, per[panel].accuracy)
                  for name, per in run.summary.items() if panel in per}
        front = pareto_front(points)
        for name, (cost, acc) in points.items():
            ax.scatter(cost, acc, s=60, color=colors.get(roles.get(name, ""), "black"), zorder=3,
                       edgecolors="black" if name in front else "none")
        if len(front) > 1:
            ax.plot([points[n][0] for n in front], [points[n][1] for n in front], "--", color="black", lw=1,
                    zorder=2, label="Pareto front")
            ax.legend(loc="lower right", fontsize=7)
        costs = [c for c, _ in points.values()]
        if costs and min(costs) > 0 and max(costs) / min(costs) > 50:
            ax.set_xscale("log")  # expert prices span orders of magnitude
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlim(ax.get_xlim())  # freeze the autoscaled range: labels are placed in pixels
        ax.set_xlabel("mean cost per task (USD)")
        ax.set_ylabel("accuracy")
        ax.set_title(panel, fontsize=10)
        ax.grid(alpha=0.3)
        panel_points.append((ax, points))
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()  # before the labels: it moves the axes, and the labels are placed in pixels
    for ax, points in panel_points:
        place_labels(ax, points)
    return fig


def pareto_plot(run: EvalRun, path: Path, *, title: str = "Cost vs accuracy") -> Path:
    """`pareto_figure` as a PNG file."""
    import io

    fig = pareto_figure(run, title=title)  # selects the Agg backend before pyplot is imported here
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=PARETO_DPI)
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
        "paired_with": CANDIDATE,
        "paired": {name: result.model_dump() for name, result in paired(run).items()},
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
    """The candidate's headline metrics, `eval/<method>/<benchmark>/<metric>` for every method and
    `eval/<method>/category/<category>/{accuracy,n}` (scored episodes over all benchmarks)."""
    out: dict[str, float] = {}
    categories = by_category(run)
    for method, per in run.summary.items():
        for bench, metrics in per.items():
            for key in ("accuracy", "cost_mean", "latency_mean", "format_valid_rate"):
                out[f"eval/{method}/{bench}/{key}"] = float(getattr(metrics, key))
            if metrics.adherence is not None:
                out[f"eval/{method}/{bench}/adherence"] = float(metrics.adherence)
            if metrics.adherence_untestable:
                out[f"eval/{method}/{bench}/adherence_untestable"] = float(metrics.adherence_untestable)
        for category, mine in categories.get(method, {}).items():
            # third-party categories may hold characters MLflow refuses in a metric key
            key = f"eval/{method}/category/{_UNSAFE_KEY.sub('_', category)}"
            out[f"{key}/accuracy"] = sum(r.correct for r in mine) / len(mine)
            out[f"{key}/n"] = float(len(mine))
        n = sum(1 for r in run.records if r.method == method)
        if run.seconds.get(method):
            out[f"eval/{method}/episodes_per_s"] = n / run.seconds[method]
    for name, result in paired(run, candidate).items():
        key = f"eval/paired/{_UNSAFE_KEY.sub('_', name)}"
        out.update({f"{key}/candidate_only": float(result.first_only), f"{key}/method_only": float(result.second_only),
                    f"{key}/p_value": result.p_value})
    cand = run.summary[candidate]["overall"]
    out.update({"accuracy": cand.accuracy, "accuracy_ci_low": cand.accuracy_ci_low,
                "accuracy_ci_high": cand.accuracy_ci_high, "cost_mean": cand.cost_mean, "latency_mean": cand.latency_mean,
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
