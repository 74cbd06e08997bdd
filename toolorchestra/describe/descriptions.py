"""Tool and model descriptions from measured behaviour (the `describe` stage's library side).

The orchestrator picks tools by their descriptions, so an LLM tool's description should say what
each expert behind it is actually good at. `measure.py` runs every LLM tool x model alias on
sampled tasks per category (QA numeric, QA lookup, tool use); this module writes what it found:
each LLM tool's description becomes its hand-written purpose plus a sentence per model stating
accuracy, tokens, cost and latency per category, and each model's description gets its own
figures. With a summarizer LLM a short summary of strengths and failure modes, written from the
recorded trajectories, is appended. The figures also go into the tool entry's `stats`. Non-LLM
tools are left as they are. Re-describing an already described catalog starts from the original
text (everything from `MARKER` on is regenerated).

With `style: compact` each model gets one short clause instead ("model smollm2: QA numeric 75%
(n=4), tool use 0% (n=2); $0.0000031/call"): accuracy and n per category and the mean cost of a
call, which is what routing needs, at about a third of the tokens; a small policy reads every
description on every turn.

Departure from the paper: its released code ships hand-written descriptions; the paper derives
them from trajectories with an LLM. Here the figures are always measured and stated; the LLM
summary is optional (a 135M local model writes poor summaries, so it is off by default).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from toolorchestra.core.settings import Settings
from toolorchestra.describe.measure import CategoryStats, DescribeConfig, Measurement, Record, measure
from toolorchestra.episodes.pool import TaskPool
from toolorchestra.llm.base import LLM, LLMError
from toolorchestra.tools.catalog import Catalog, LocalSearchBackend

MARKER = "Measured on sampled tasks"
"""Start of the generated part of a description; text from here on is replaced on a re-run."""
_CATEGORY_NAMES = {"qa_arithmetic": "QA arithmetic", "qa_numeric": "QA numeric", "qa_lookup": "QA lookup", "tool_use": "tool use"}


# ------------------------------------------------------------------------------ summaries

_SUMMARY_PROMPT = (
    "You write tool descriptions for an orchestrator that routes tasks to tools. Below are results of "
    "the tool '{tool}' backed by the model '{model}' on sample tasks: each shows the task, the expected "
    "answer, what the tool returned and whether it was right. In at most two sentences, state what it "
    "is good at and how it fails. No preamble."
)


def summarize(llm: LLM, tool: str, alias: str, records: list[Record], examples: int) -> str:
    """A short strengths / failure-modes summary written by `llm` from recorded trajectories."""
    # Show both successes and failures so the summary can contrast them.
    ordered = sorted(records, key=lambda r: (not r.correct, r.category, r.task_id))
    right = [r for r in ordered if r.correct][: (examples + 1) // 2]
    wrong = [r for r in ordered if not r.correct][: examples - len(right)]
    shown = "\n\n".join(
        f"[{_CATEGORY_NAMES[r.category]}] task: {r.question[:300]}\nexpected: {r.expected[:120]}\n"
        f"returned: {r.output[:200] or '(nothing)'}\nresult: {'right' if r.correct else 'wrong'}"
        for r in right + wrong
    )
    messages = [
        {"role": "system", "content": _SUMMARY_PROMPT.format(tool=tool, model=alias)},
        {"role": "user", "content": shown or "(no results)"},
    ]
    text = " ".join(llm.chat(messages, max_tokens=120).text.split())
    return text[:400].strip()


def add_summaries(measurement: Measurement, summarizer: LLM, config: DescribeConfig) -> None:
    """Ask `summarizer` for a summary per (tool, model); a failed call is counted, never fatal."""
    for tool, models in measurement.stats.items():
        for alias in models:
            rows = [r for r in measurement.records
                    if r.model == alias and (r.tool == tool or r.category == "tool_use")]
            if not rows:
                continue
            try:
                text = summarize(summarizer, tool, alias, rows, config.summary_examples)
            except LLMError:
                measurement.summary_failures += 1
                continue
            if text:
                measurement.summaries[(tool, alias)] = text
            else:
                measurement.summary_failures += 1


# ------------------------------------------------------------------------------ descriptions


def format_usd(value: float) -> str:
    """Two significant figures without exponent notation: 6.24e-06 -> '$0.0000062'."""
    if value <= 0:
        return "$0"
    digits = max(2, 1 - math.floor(math.log10(value)))
    return f"${value:.{digits}f}"


def format_seconds(value: float) -> str:
    """'2.4 s', '35 ms', '<1 ms'."""
    if value >= 1:
        return f"{value:.1f} s"
    if value >= 0.001:
        return f"{value * 1000:.0f} ms"
    return "<1 ms"


def _figures(category: str, s: CategoryStats) -> str:
    name = _CATEGORY_NAMES[category]
    share = f"{s.correct}/{s.n} ({round(100 * s.accuracy)}%)"
    if s.metric == "hit_rate":
        verdict = f"answer found in the results for {share}"
    elif s.metric == "success":
        verdict = f"{share} solved as the agent"
    else:
        verdict = f"{share} correct"  # e.g. "3/4 (75%) correct"
    tokens = round(s.mean_prompt_tokens + s.mean_completion_tokens)
    unit = "task" if category == "tool_use" else "call"
    return (f"{name}: {verdict}, {tokens:,} tokens, {format_usd(s.mean_cost_usd)} and "
            f"{format_seconds(s.mean_latency_s)} per {unit}")


def base_description(text: str) -> str:
    """The hand-written part of a (possibly already described) description."""
    head, _, _ = text.partition(MARKER)
    return head.strip()


def _compact(categories: dict[str, CategoryStats], min_n: int = 0) -> str:
    """'QA numeric 75% (n=4), tool use 0% (n=2); $0.0000031/call' (cost: the QA calls' mean); a
    category measured on fewer than `min_n` samples is left out, the cost stays.

    >>> s = CategoryStats(n=2, correct=0, accuracy=0.0, metric="accuracy", mean_prompt_tokens=90,
    ...                   mean_completion_tokens=9, mean_cost_usd=2e-06, mean_latency_s=0.5, errors=0)
    >>> _compact({"qa_numeric": s, "tool_use": s})
    'QA numeric 0% (n=2), tool use 0% (n=2); $0.0000020/call'
    >>> _compact({"qa_numeric": s, "tool_use": s}, min_n=10)
    '$0.0000020/call'
    """
    shares = ", ".join(f"{_CATEGORY_NAMES[c]} {round(100 * s.accuracy)}% (n={s.n})"
                       for c, s in categories.items() if s.n >= min_n)
    calls = [s for c, s in categories.items() if c != "tool_use"]
    if not calls:
        return shares
    mean_cost = math.fsum(s.mean_cost_usd * s.n for s in calls) / max(1, sum(s.n for s in calls))
    cost = f"{format_usd(mean_cost)}/call"
    return f"{shares}; {cost}" if shares else cost


def tool_description(base: str, per_model: dict[str, dict[str, CategoryStats]],
                     summaries: dict[str, str], style: str = "full", stated_min_n: int = 0) -> str:
    parts = [base.rstrip(".") + "." if base else ""]
    sentences = []
    for alias, categories in per_model.items():
        if not categories:
            continue
        figures = _compact(categories, stated_min_n) if style == "compact" else "; ".join(
            _figures(c, s) for c, s in categories.items())
        if not figures:
            continue
        sentence = f"model {alias}: {figures}."
        if summaries.get(alias):
            sentence += f" Observed: {summaries[alias]}"
        sentences.append(sentence)
    if sentences:
        parts.append(f"{MARKER}: " + " ".join(sentences) if style == "compact"
                     else f"{MARKER} (describe stage): " + " ".join(sentences))
    return " ".join(p for p in parts if p).strip()


def model_description(base: str, alias: str, measurement: Measurement) -> str | None:
    """The model's description with its tool-use figures and its QA accuracy per tool."""
    bits = []
    tool_use = next((m[alias]["tool_use"] for m in measurement.stats.values()
                     if alias in m and "tool_use" in m[alias]), None)
    if tool_use is not None:
        bits.append(_figures("tool_use", tool_use))
    for tool, models in measurement.stats.items():
        for category, s in models.get(alias, {}).items():
            if category != "tool_use":
                bits.append(f"{_CATEGORY_NAMES[category]} via {tool}: {round(100 * s.accuracy)}%"
                            f"{' hit rate' if s.metric == 'hit_rate' else ''}")
    if not bits:
        return None
    return f"{base.rstrip('.') + '. ' if base else ''}{MARKER} (describe stage): {'; '.join(bits)}."


def apply_measurement(catalog: Catalog, measurement: Measurement, config: DescribeConfig) -> Catalog:
    """The catalog with measured descriptions and `stats` on its LLM tools and models."""
    tools = []
    for entry in catalog.tools:
        per_model = measurement.stats.get(entry.name)
        if per_model is None:
            tools.append(entry)  # non-LLM tools (and unmeasured ones) keep their descriptions
            continue
        base = entry.stats.get("base_description") or base_description(entry.description)
        summaries = {a: measurement.summaries[(entry.name, a)] for a in per_model if (entry.name, a) in measurement.summaries}
        stats = {
            "base_description": base,
            "describe": {"seed": config.seed, "samples_per_category": config.samples_per_category,
                         "categories": list(config.categories)},
            "models": {a: {c: s.model_dump() for c, s in cats.items()} for a, cats in per_model.items()},
        }
        if summaries:
            stats["summaries"] = summaries
        tools.append(entry.model_copy(update={
            "description": tool_description(base, per_model, summaries, config.style, config.stated_min_n),
            "stats": stats}))
    models = {}
    for alias, model in catalog.models.items():
        text = model_description(base_description(model.description), alias, measurement)
        models[alias] = model.model_copy(update={"description": text}) if text else model
    return catalog.model_copy(update={"tools": tools, "models": models})


def relocated_dict(catalog: Catalog, new_base: os.PathLike[str] | str) -> dict[str, Any]:
    """The catalog as JSON data whose relative paths resolve from `new_base` (where it is written)."""
    data = catalog.to_dict()
    for raw, entry in zip(data["tools"], catalog.tools, strict=True):
        if isinstance(entry.backend, LocalSearchBackend):
            target = catalog.resolve(entry.backend.documents)
            if not os.path.isabs(entry.backend.documents):
                raw["backend"]["documents"] = os.path.relpath(os.path.abspath(target), os.path.abspath(new_base))
    return data


def describe_catalog(
    catalog: Catalog,
    pool: TaskPool,
    settings: Settings,
    config: DescribeConfig,
    *,
    llm_for: Callable[[str], LLM] | None = None,
    summarizer: LLM | None = None,
) -> tuple[Catalog, Measurement]:
    """Measure, optionally summarise, and return the described catalog with the measurement."""
    measurement = measure(catalog, pool, settings, config, llm_for=llm_for)
    if summarizer is not None:
        add_summaries(measurement, summarizer, config)
    return apply_measurement(catalog, measurement, config), measurement
