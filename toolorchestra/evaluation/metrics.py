"""Per-task records and the metrics an evaluation reports for each method and benchmark.

Metrics (per method x benchmark, and `overall`, pooled over every task of every benchmark):

- `accuracy`: share of tasks judged correct (`judges.py`);
- `cost_mean` / `cost_total`: USD per task / in all, the policy's own tokens at its catalog price
  plus every tool call (per-call, per-second and the tokens of the experts it called);
- `cost_per_correct`: `cost_total` over the tasks judged correct (None when none is): what one
  solved task costs, the figure to compare when a cheap method solves almost nothing;
- `latency_mean`: seconds per task, the wall time of the policy's generations (a batched
  generation counts in full for each episode in the batch, which is what that episode waited)
  plus the tools';
- `calls_per_task`: mean calls of each tool; `format_valid_rate`: share of episodes whose every
  turn was a well-formed call or a final message; `answered_rate`;
- `adherence` (preference benchmark only), defined below;
- `tool_share` / `model_share`: where the method's calls went. `tool_share[T]` is calls to tool T
  over all its tool calls (`calls_total`); `model_share[M]` is calls that reached expert model M
  (a catalog alias in a turn's `tool_usage`, the tokens an expert tool spent) over all such calls
  (`model_calls_total`). A policy that collapsed onto one tool or one expert shows a share near 1.

Intervals
---------
Accuracy and adherence are proportions measured on a few dozen items, so each comes with its
95% Wilson score interval (`accuracy_ci_low` / `accuracy_ci_high`, `adherence_ci_low` /
`adherence_ci_high`; `wilson_interval`). Wilson rather than the normal approximation because it
stays inside [0, 1] and is not degenerate at 0 or n successes: 0 of 10 is [0, 0.278], not [0, 0].
With no items the interval is [0, 1] (nothing is known).

Preference adherence
--------------------
How well tool usage and spending follow each instruction. Every item of the preference benchmark
pairs a held-out task with an eval-split preference whose *intents* state what the instruction
asks for: a tool to avoid (`calls/T` lower), a tool to use (`calls/T` higher), spending less
(`cost` lower) or answering faster (`latency` lower); the `accuracy` intent every pair carries is
measured by accuracy, not here. Each method runs every item twice with identical tools, prices and
greedy decoding: once with the instruction appended to the task (*instructed*) and once without
it (*neutral*). An intent is **followed** when, with v the instructed run's value and n the
neutral run's:

- `calls/T` lower: v < n (the instructed run called T less);
- `calls/T` higher: v >= 1 and v >= n (it called T, at least as often as without being asked);
- `cost` / `latency` lower: v <= (1 - margin) * n, with `margin` (default 5%) so that
  token-count and timing noise of an unchanged episode does not count as following.

A "lower" intent whose neutral run is already at 0 (neither run called T, or both cost nothing)
is **untestable**: there was nothing to lower, so the run shows nothing about the instruction.
It is neither followed nor violated: it is left out of adherence's denominator and counted in
`adherence_untestable` (an instructed run that *did* call T when the neutral one did not is a
violation, not untestable). Before this rule, such intents counted as followed, which gave a
method that never calls a tool free credit for every "avoid it" instruction.

Intents on a tool the method is not offered (an expert alone has no LLM tools) are skipped.
**Adherence** is the share of followed intents among the testable ones (and per preference kind,
`adherence_by_kind`); `adherence_n` counts the testable intents. The neutral runs are reported
with `variant = "neutral"` and are not counted in accuracy, cost or latency.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from typing import Any, Literal

from pydantic import BaseModel, Field

from toolorchestra.agent.trajectory import model_calls

Variant = Literal["plain", "instructed", "neutral"]


class TaskRecord(BaseModel):
    """One episode of one method on one task: outcome, accounting, judgement and trajectory."""

    method: str
    benchmark: str
    task_id: str
    key: str
    kind: Literal["qa", "tool_use"]
    category: str | None = Field(None, description="a QA item's category (its own label, else `qa_category`), "
                                 "`tool_use` for a ticket: the report's per-category table")
    variant: Variant = "plain"
    preference_id: str | None = None
    preference_kind: str | None = None
    preference: str | None = None
    intents: list[dict[str, str]] = Field(default_factory=list)
    correct: bool
    answered: bool
    format_valid: bool
    cost_usd: float
    latency_s: float
    turns: int
    stop_reason: str | None = None
    tool_calls: dict[str, int] = Field(default_factory=dict)
    offered_tools: list[str] = Field(default_factory=list)
    judgement: dict[str, Any] = Field(default_factory=dict)
    trajectory: dict[str, Any] = Field(default_factory=dict)

    @property
    def first_call(self) -> str:
        """The tool of the episode's first turn, `(answer)` when that turn called none: where the
        method sent the task."""
        turns = self.trajectory.get("turns") or []
        return (turns[0].get("tool") or "(answer)") if turns else "(no turn)"

    @property
    def scored(self) -> bool:
        """Counted in accuracy / cost / latency (neutral runs only serve adherence)."""
        return self.variant != "neutral"


def wilson_interval(successes: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `successes / n` (scipy's `binomtest`); (0, 1)
    when n is 0.

    >>> [round(x, 4) for x in wilson_interval(0, 10)]
    [0.0, 0.2775]
    >>> [round(x, 4) for x in wilson_interval(41, 100)]
    [0.3187, 0.508]
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    from scipy.stats import binomtest  # lazy: scipy.stats costs a second to import

    ci = binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    # clamp: the closed form can land a rounding error outside [0, 1] at 0 or n successes
    return max(0.0, float(ci.low)), min(1.0, float(ci.high))


class Paired(BaseModel):
    """Two methods on the same scored episodes: how many each alone solved, both, neither, and the
    exact McNemar test's two-sided p (a binomial test of the discordant episodes at 1/2)."""

    first_only: int
    second_only: int
    both: int
    neither: int
    p_value: float


def paired_outcomes(records: list[TaskRecord], first: str, second: str) -> Paired | None:
    """`first` against `second` over the scored episodes both ran (benchmark, key, variant); None
    when they share none. Two accuracies whose intervals overlap can still differ beyond noise on
    the same episodes (and the reverse): the discordant episodes are what a change moved.

    >>> def ep(method, task, correct):
    ...     return TaskRecord(method=method, benchmark="qa", task_id=task, key=task, kind="qa", correct=correct,
    ...                       answered=True, format_valid=True, cost_usd=0.0, latency_s=0.0, turns=1)
    >>> runs = [ep("a", str(i), i < 9) for i in range(10)] + [ep("b", str(i), i == 9) for i in range(10)]
    >>> paired = paired_outcomes(runs, "a", "b")
    >>> (paired.first_only, paired.second_only, paired.both, paired.neither, round(paired.p_value, 4))
    (9, 1, 0, 0, 0.0215)
    """
    def outcomes(method: str) -> dict[tuple[str, str, str], bool]:
        return {(r.benchmark, r.key, r.variant): r.correct for r in records if r.method == method and r.scored}

    a, b = outcomes(first), outcomes(second)
    shared = a.keys() & b.keys()
    if not shared:
        return None
    first_only = sum(a[k] and not b[k] for k in shared)
    second_only = sum(b[k] and not a[k] for k in shared)
    both = sum(a[k] and b[k] for k in shared)
    discordant = first_only + second_only
    p_value = 1.0
    if discordant:
        from scipy.stats import binomtest  # lazy: scipy.stats costs a second to import

        p_value = float(binomtest(first_only, discordant, 0.5).pvalue)
    return Paired(first_only=first_only, second_only=second_only, both=both,
                  neither=len(shared) - discordant - both, p_value=p_value)


def proportion_interval(rate: float | None, n: int) -> tuple[float, float]:
    """The Wilson interval of a rate given as a share of n (the successes are `round(rate * n)`),
    for reports that stored only the rate and n."""
    if rate is None or n <= 0 or math.isnan(rate):
        return 0.0, 1.0
    return wilson_interval(min(n, max(0, round(rate * n))), n)


class Metrics(BaseModel):
    n: int
    accuracy: float
    accuracy_ci_low: float = Field(0.0, description="95% Wilson interval of accuracy, lower bound")
    accuracy_ci_high: float = Field(1.0, description="95% Wilson interval of accuracy, upper bound")
    cost_mean: float
    cost_total: float
    cost_per_correct: float | None = Field(None, description="cost_total / correct tasks (None: none correct)")
    latency_mean: float
    format_valid_rate: float
    answered_rate: float
    calls_per_task: dict[str, float] = Field(default_factory=dict)
    llm_judged: int = Field(0, description="tasks the LLM judge decided (exact match had failed)")
    adherence: float | None = None
    adherence_n: int = Field(0, description="testable intents (the denominator of adherence)")
    adherence_untestable: int = Field(0, description="'lower' intents whose neutral run was already at 0")
    adherence_by_kind: dict[str, float] = Field(default_factory=dict)
    adherence_ci_low: float | None = Field(None, description="95% Wilson interval of adherence (None: no intent)")
    adherence_ci_high: float | None = None
    calls_total: int = Field(0, description="tool calls of all scored episodes (tool_share's denominator)")
    tool_share: dict[str, float] = Field(default_factory=dict, description="tool -> its share of calls_total")
    model_calls_total: int = Field(0, description="calls that reached an expert model (model_share's denominator)")
    model_share: dict[str, float] = Field(default_factory=dict, description="expert alias -> its share of those")


def intent_value(record: TaskRecord, key: str) -> float:
    if key.startswith("calls/"):
        return float(record.tool_calls.get(key.removeprefix("calls/"), 0))
    if key.startswith("models/"):  # calls the model served, counted from the recorded turns
        return float(model_calls(record.trajectory.get("turns") or []).get(key.removeprefix("models/"), 0))
    if key == "cost":
        return record.cost_usd
    if key == "latency":
        return record.latency_s
    raise KeyError(key)


def intent_followed(key: str, prefer: str, value: float, neutral: float, *, margin: float = 0.05) -> bool | None:
    """Whether an instructed run followed one intent, given the neutral run (module docstring);
    None when the intent is untestable (a "lower" intent whose neutral run is already at 0).

    >>> intent_followed("calls/web_search", "lower", 0, 0) is None  # neither run called it
    True
    >>> intent_followed("calls/web_search", "lower", 1, 0)  # called it although told not to
    False
    >>> intent_followed("calls/web_search", "lower", 1, 1)
    False
    >>> intent_followed("calls/code_interpreter", "higher", 1, 1)
    True
    >>> intent_followed("cost", "lower", 0.0098, 0.01)
    False
    >>> intent_followed("cost", "lower", 0.009, 0.01)
    True
    """
    if prefer == "lower" and neutral <= 0:
        return None if value <= 0 else False
    if key.startswith("calls/"):
        if prefer == "lower":
            return value < neutral
        return value >= 1 and value >= neutral
    if prefer == "lower":
        return value <= (1.0 - margin) * neutral
    return value >= (1.0 + margin) * neutral  # no generated intent asks for more cost or latency


def adherence_checks(records: list[TaskRecord], *, margin: float = 0.05) -> list[dict[str, Any]]:
    """One row per (instructed run, intent): the values and whether the intent was followed
    (`followed` None and `testable` False for an untestable intent)."""
    neutral = {(r.method, r.benchmark, r.key): r for r in records if r.variant == "neutral"}
    rows = []
    for record in records:
        if record.variant != "instructed":
            continue
        base = neutral.get((record.method, record.benchmark, record.key))
        if base is None:
            continue
        for intent in record.intents:
            key, prefer = intent["key"], intent["prefer"]
            if key == "accuracy":
                continue
            if key.startswith("calls/") and key.removeprefix("calls/") not in record.offered_tools:
                continue
            value, reference = intent_value(record, key), intent_value(base, key)
            followed = intent_followed(key, prefer, value, reference, margin=margin)
            rows.append({"method": record.method, "benchmark": record.benchmark, "key": record.key,
                         "preference_kind": record.preference_kind, "intent": key, "prefer": prefer,
                         "instructed": value, "neutral": reference, "followed": followed,
                         "testable": followed is not None})
    return rows


def _shares(counts: Counter[str]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))} if total else {}


def _metrics(records: list[TaskRecord], checks: list[dict[str, Any]]) -> Metrics:
    scored = [r for r in records if r.scored]
    n = len(scored)
    tools = sorted({t for r in scored for t in r.tool_calls})
    correct = sum(1 for r in scored if r.correct)
    tool_counts: Counter[str] = Counter()
    model_counts: Counter[str] = Counter()
    for r in scored:
        tool_counts.update(r.tool_calls)
        model_counts.update(model_calls(r.trajectory.get("turns") or []))
    low, high = wilson_interval(correct, n)
    cost_total = sum(r.cost_usd for r in scored)
    out = Metrics(
        n=n,
        accuracy=correct / n if n else 0.0,
        accuracy_ci_low=low,
        accuracy_ci_high=high,
        cost_mean=statistics.fmean(r.cost_usd for r in scored) if n else 0.0,
        cost_total=cost_total,
        cost_per_correct=cost_total / correct if correct else None,
        latency_mean=statistics.fmean(r.latency_s for r in scored) if n else 0.0,
        format_valid_rate=statistics.fmean(r.format_valid for r in scored) if n else 0.0,
        answered_rate=statistics.fmean(r.answered for r in scored) if n else 0.0,
        calls_per_task={t: sum(r.tool_calls.get(t, 0) for r in scored) / n for t in tools} if n else {},
        llm_judged=sum(1 for r in scored if r.judgement.get("method") == "llm"),
        calls_total=sum(tool_counts.values()),
        tool_share=_shares(tool_counts),
        model_calls_total=sum(model_counts.values()),
        model_share=_shares(model_counts),
    )
    testable = [c for c in checks if c["followed"] is not None]
    out.adherence_untestable = len(checks) - len(testable)
    if testable:
        out.adherence = statistics.fmean(c["followed"] for c in testable)
        out.adherence_n = len(testable)
        out.adherence_ci_low, out.adherence_ci_high = wilson_interval(sum(1 for c in testable if c["followed"]),
                                                                      len(testable))
        by_kind: dict[str, list[bool]] = defaultdict(list)
        for c in testable:
            by_kind[c["preference_kind"] or "?"].append(c["followed"])
        out.adherence_by_kind = {k: statistics.fmean(v) for k, v in sorted(by_kind.items())}
    return out


def summarize(records: list[TaskRecord], *, margin: float = 0.05) -> dict[str, dict[str, Metrics]]:
    """method -> benchmark (and `overall`) -> metrics."""
    checks = adherence_checks(records, margin=margin)
    out: dict[str, dict[str, Metrics]] = {}
    methods = list(dict.fromkeys(r.method for r in records))
    for method in methods:
        mine = [r for r in records if r.method == method]
        my_checks = [c for c in checks if c["method"] == method]
        per: dict[str, Metrics] = {}
        for bench in dict.fromkeys(r.benchmark for r in mine):
            per[bench] = _metrics([r for r in mine if r.benchmark == bench],
                                  [c for c in my_checks if c["benchmark"] == bench])
        per["overall"] = _metrics(mine, my_checks)
        out[method] = per
    return out


def task_lists(records: list[TaskRecord]) -> dict[str, list[str]]:
    """method -> the ordered list of (benchmark, task, variant) keys it was evaluated on."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in records:
        out[r.method].append(f"{r.key}#{r.variant}")
    return {m: sorted(keys) for m, keys in out.items()}

