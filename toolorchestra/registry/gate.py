"""The promotion gate: may a candidate replace the champion? A pure function of one evaluation.

The gate reads the candidate's, the champion's and the baselines' metrics **from the same
evaluation** (same task list, same tools and prices; the `evaluate` stage re-runs the champion
beside the candidate) and moves `champion` only when every check passes:

1. **solves something** (hard, whatever the floors): a candidate with zero accuracy, or evaluated
   on no task, is never champion;
2. **the floors** `min_accuracy` and `min_format_valid_rate`;
3. **beats every baseline** in `baselines` (default: the prompted base model `prompted` and the
   `random_router`) on accuracy, on every promotion including the first. With `rule: interval`
   (the default) the candidate's 95% Wilson lower bound must exceed the baseline's accuracy plus
   `min_margin`: on a few dozen tasks a lead of a few points is noise, and this asks that the
   candidate be better than the baseline's figure beyond its own uncertainty (the baseline's
   uncertainty is not added: that test would need several times more tasks to ever pass). With
   `rule: point` the candidate's accuracy itself must exceed it. A baseline the evaluation did not
   run is a failed check that says so (turn it on in `evaluate.methods` or drop it here);
   and **is not clearly worse** than any method in `not_worse_than` (default: the SFT-only warm
   start): refused when that method's 95% Wilson lower bound is above the candidate's accuracy, or
   when, on the same episodes (the report's paired counts, over all benchmarks), it solved more that
   the candidate missed than the reverse with exact McNemar p below `paired_alpha` (0.05), so a
   GRPO run that undid its warm start does not ship (skipped, with a note, when not evaluated);
4. with a champion, **at least as accurate**: `candidate.accuracy >= champion.accuracy -
   accuracy_tolerance`, and **no more expensive than allowed**: `candidate.cost_mean <=
   max_cost_ratio * champion.cost_mean` (a champion that cost nothing admits only a candidate that
   costs nothing).

Accuracy and cost are pooled over the benchmarks named in `benchmarks` (all when None), weighted
by their task counts. Every check yields a reason with its figures and intervals, passed or not,
so a refusal says exactly why; `Decision.summary` is that in one line.

>>> from toolorchestra.registry.gate import GateConfig, Scores, decide
>>> base = {"prompted": Scores(accuracy=0.10, cost_mean=0.002, n=50),
...         "random_router": Scores(accuracy=0.20, cost_mean=0.02, n=50)}
>>> champ = Scores(accuracy=0.60, cost_mean=0.010, format_valid_rate=1.0, n=50)
>>> decide(Scores(accuracy=0.59, cost_mean=0.004, format_valid_rate=1.0, n=50), champ,
...        GateConfig(accuracy_tolerance=0.02, max_cost_ratio=1.0), baselines=base).promote
True
>>> d = decide(Scores(accuracy=0.50, cost_mean=0.004, format_valid_rate=1.0, n=50), champ, GateConfig(),
...            baselines=base)
>>> d.promote, d.failed
(False, ['accuracy'])
>>> first = decide(Scores(accuracy=0.0, cost_mean=0.0, n=100), None, GateConfig(), baselines=base, name="trained")
>>> first.reasons[0]
'first promotion: there is no champion yet'
>>> first.failed
['solves_tasks', 'beats:prompted', 'beats:random_router']
>>> print(first.summary)
not promoted: trained solved no task: 0.0% [0.0, 3.7] on 100 tasks; trained 0.0% [0.0, 3.7] does not beat prompted 10.0% [4.3, 21.4] (rule interval: the lower bound 0.0% must exceed 10.0% + margin 0.0 pts); trained 0.0% [0.0, 3.7] does not beat random_router 20.0% [11.2, 33.0] (rule interval: the lower bound 0.0% must exceed 20.0% + margin 0.0 pts)
>>> decide(Scores(accuracy=0.4, cost_mean=0.01, n=50), None, GateConfig(), baselines={"prompted": base["prompted"]}
...        ).checks[-2].reason
'baseline random_router is not in the evaluation: run it (evaluate.methods) or drop it from promote.gate.baselines'
>>> undone = {**base, "sft_only": Scores(accuracy=0.66, cost_mean=0.01, n=50)}
>>> print(decide(Scores(accuracy=0.40, cost_mean=0.01, n=50), None, GateConfig(), baselines=undone).summary)
not promoted: candidate 40.0% [27.6, 53.8] is clearly worse than sft_only 66.0% [52.2, 77.6] (its lower bound 52.2% must not exceed 40.0%)
>>> close = {**base, "sft_only": Scores(accuracy=0.64, cost_mean=0.01, n=50)}
>>> moved = {"sft_only": {"first_only": 1, "second_only": 9, "p_value": 0.0215}}
>>> decide(Scores(accuracy=0.52, cost_mean=0.01, n=50), None, GateConfig(), baselines=close).promote
True
>>> print(decide(Scores(accuracy=0.52, cost_mean=0.01, n=50), None, GateConfig(), baselines=close, paired=moved).summary)
not promoted: candidate 52.0% [38.5, 65.2] is clearly worse than sft_only 64.0% [50.1, 75.9] (its lower bound 50.1% must not exceed 52.0%; on the same episodes 1 right only for candidate, 9 only for sft_only, exact McNemar p = 0.021, refused below 0.05 when sft_only leads)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolorchestra.evaluation.metrics import proportion_interval

_STRICT = ConfigDict(extra="forbid", frozen=True)


class GateConfig(BaseModel):
    model_config = _STRICT

    accuracy_tolerance: float = Field(0.0, ge=0.0, le=1.0, description="accuracy points the candidate may lose")
    max_cost_ratio: float = Field(1.0, gt=0.0, description="candidate mean cost / champion mean cost, at most")
    min_accuracy: float = Field(0.0, ge=0.0, le=1.0)
    min_format_valid_rate: float = Field(0.0, ge=0.0, le=1.0)
    benchmarks: list[str] | None = Field(None, description="benchmarks the gate reads (None: all)")
    baselines: list[str] = Field(["prompted", "random_router"],
                                 description="methods of the evaluation every promotion must beat on accuracy")
    min_margin: float = Field(0.0, ge=0.0, le=1.0, description="accuracy the candidate must beat each baseline by")
    not_worse_than: list[str] = Field(["sft_only"], description=(
        "methods the candidate must not be clearly worse than: refused when the method's 95% Wilson lower "
        "bound is above the candidate's accuracy (the SFT-only warm start: GRPO must not undo it); a method "
        "the evaluation did not run is skipped, with a note"))
    paired_alpha: float | None = Field(0.05, gt=0.0, lt=1.0, description=(
        "a method in not_worse_than that solved more of the same episodes than the candidate, with the exact "
        "McNemar p below this (the report's `paired`, read when `benchmarks` is None), also refuses; None: "
        "intervals only"))
    rule: Literal["point", "interval"] = Field(
        "interval", description="point: accuracy > baseline + margin; interval: the candidate's 95% Wilson lower "
                                "bound > baseline + margin")


class Scores(BaseModel):
    """What the gate reads of one method's evaluation. The accuracy interval defaults to the
    Wilson interval of `accuracy` on `n` tasks."""

    model_config = ConfigDict(frozen=True)

    accuracy: float
    cost_mean: float
    format_valid_rate: float = 1.0
    latency_mean: float = 0.0
    n: int = 0
    accuracy_ci_low: float | None = None
    accuracy_ci_high: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _interval(cls, data: Any) -> Any:
        if isinstance(data, dict) and (data.get("accuracy_ci_low") is None or data.get("accuracy_ci_high") is None):
            low, high = proportion_interval(data.get("accuracy"), int(data.get("n") or 0))
            data = {**data, "accuracy_ci_low": low, "accuracy_ci_high": high}
        return data

    @property
    def shown(self) -> str:
        """`41.0% [31.9, 50.8]`: accuracy and its 95% interval."""
        return (f"{100 * self.accuracy:.1f}% [{100 * (self.accuracy_ci_low or 0.0):.1f}, "
                f"{100 * (self.accuracy_ci_high if self.accuracy_ci_high is not None else 1.0):.1f}]")


class Check(BaseModel):
    name: str
    passed: bool
    reason: str


class Decision(BaseModel):
    promote: bool
    checks: list[Check]
    first_promotion: bool = False

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    @property
    def reasons(self) -> list[str]:
        out = ["first promotion: there is no champion yet"] if self.first_promotion else []
        return out + [("passed: " if c.passed else "failed: ") + c.reason for c in self.checks]

    @property
    def label(self) -> str:
        return "promoted" if self.promote else "rejected"

    @property
    def summary(self) -> str:
        """The decision in one plain line: why not (every failed check), or what it beat."""
        if not self.promote:
            return "not promoted: " + ("; ".join(c.reason for c in self.checks if not c.passed) or "no check ran")
        beaten = [c.reason for c in self.checks if c.name.startswith("beats:") or c.name == "accuracy"]
        return "promoted to champion" + (": " + "; ".join(beaten) if beaten else "")


def pooled_scores(per_benchmark: Mapping[str, Mapping[str, Any]], benchmarks: list[str] | None) -> Scores:
    """Scores pooled (task-weighted) over some benchmarks of a method's metrics from metrics.json
    (`{benchmark: {n, accuracy, cost_mean, ...}}`, with `overall`). The pooled accuracy interval is
    the Wilson interval of the pooled successes."""
    if benchmarks is None:
        m = per_benchmark["overall"]
        return Scores(accuracy=m["accuracy"], cost_mean=m["cost_mean"], format_valid_rate=m["format_valid_rate"],
                      latency_mean=m["latency_mean"], n=m["n"], accuracy_ci_low=m.get("accuracy_ci_low"),
                      accuracy_ci_high=m.get("accuracy_ci_high"))
    missing = sorted(set(benchmarks) - set(per_benchmark))
    if missing:
        raise KeyError(f"benchmarks {missing} are not in the evaluation; it has {sorted(per_benchmark)}")
    chosen = [per_benchmark[b] for b in benchmarks]
    n = sum(m["n"] for m in chosen)
    if n == 0:
        return Scores(accuracy=0.0, cost_mean=0.0, format_valid_rate=0.0, n=0)

    def mean(key: str) -> float:
        return sum(m[key] * m["n"] for m in chosen) / n

    return Scores(accuracy=mean("accuracy"), cost_mean=mean("cost_mean"), format_valid_rate=mean("format_valid_rate"),
                  latency_mean=mean("latency_mean"), n=n)


def paired_counts(report: Mapping[str, Any], candidate: str) -> dict[str, Any] | None:
    """The report's paired counts (metrics.json `paired`) when they are `candidate`'s (`paired_with`):
    the evaluation pairs its own candidate with every method, so another candidate has none, nor has
    a report written before the pairing."""
    return report.get("paired") if report.get("paired_with") == candidate else None


def baseline_check(name: str, candidate: Scores, baseline: Scores | None, config: GateConfig, *,
                   candidate_name: str = "candidate") -> Check:
    """Does the candidate beat one baseline on accuracy under `config.rule` (module docstring)?"""
    check = f"beats:{name}"
    if baseline is None:
        return Check(name=check, passed=False, reason=(f"baseline {name} is not in the evaluation: run it "
                                                       "(evaluate.methods) or drop it from promote.gate.baselines"))
    need = baseline.accuracy + config.min_margin
    if config.rule == "interval":
        value, what = candidate.accuracy_ci_low or 0.0, "the lower bound"
    else:
        value, what = candidate.accuracy, "the accuracy"
    passed = value > need + 1e-12
    verb = "beats" if passed else "does not beat"
    return Check(name=check, passed=passed, reason=(
        f"{candidate_name} {candidate.shown} {verb} {name} {baseline.shown} (rule {config.rule}: {what} "
        f"{100 * value:.1f}% must exceed {100 * baseline.accuracy:.1f}% + margin {100 * config.min_margin:.1f} pts)"))


def regression_check(name: str, candidate: Scores, reference: Scores | None, *,
                     candidate_name: str = "candidate", paired: Mapping[str, Any] | None = None,
                     alpha: float | None = None) -> Check:
    """Is the candidate not clearly worse than `reference`: its lower bound at most the candidate's
    accuracy, and, given `paired` (the report's counts on the same episodes: `first_only` for the
    candidate, `second_only` for the reference, `p_value`) and `alpha`, not more episodes solved
    only by the reference with p below `alpha`? Paired, a regression shows where the two intervals
    still overlap: the episodes both solve or both miss do not dilute it."""
    check = f"not_worse_than:{name}"
    if reference is None:
        return Check(name=check, passed=True, reason=f"{name} is not in the evaluation: not compared")
    low = reference.accuracy_ci_low or 0.0
    passed = candidate.accuracy >= low - 1e-12
    on_pairs = ""
    if paired is not None and alpha is not None:
        mine, theirs, p = int(paired["first_only"]), int(paired["second_only"]), float(paired["p_value"])
        passed = passed and not (theirs > mine and p < alpha)
        on_pairs = (f"; on the same episodes {mine} right only for {candidate_name}, {theirs} only for {name}, "
                    f"exact McNemar p = {p:.2g}, refused below {alpha:g} when {name} leads")
    verb = "is not clearly worse than" if passed else "is clearly worse than"
    return Check(name=check, passed=passed, reason=(
        f"{candidate_name} {candidate.shown} {verb} {name} {reference.shown} (its lower bound {100 * low:.1f}% "
        f"must not exceed {100 * candidate.accuracy:.1f}%{on_pairs})"))


def decide(candidate: Scores, champion: Scores | None, config: GateConfig, *,
           baselines: Mapping[str, Scores] | None = None, name: str = "candidate",
           paired: Mapping[str, Mapping[str, Any]] | None = None) -> Decision:
    """The gate's decision with one check per rule (module docstring). `baselines` holds the
    scores of the evaluation's methods named in `config.baselines` (one missing fails its check);
    `name` is the candidate's method name, used in the reasons; `paired` the report's paired counts
    per method (all benchmarks: ignored when `config.benchmarks` names some)."""
    baselines = baselines or {}
    paired = (paired or {}) if config.benchmarks is None else {}
    if candidate.n == 0:
        solves = Check(name="evaluated", passed=False, reason=f"{name} was evaluated on no task")
    else:
        solved = max(1, round(candidate.accuracy * candidate.n)) if candidate.accuracy > 0 else 0
        solves = Check(name="solves_tasks", passed=solved > 0, reason=(
            f"{name} solved {solved} of {candidate.n} tasks ({candidate.shown})" if solved else
            f"{name} solved no task: {candidate.shown} on {candidate.n} tasks"))
    checks = [
        solves,
        Check(name="min_accuracy", passed=candidate.accuracy >= config.min_accuracy,
              reason=f"accuracy {candidate.accuracy:.3f} vs floor {config.min_accuracy:.3f}"),
        Check(name="min_format_valid_rate", passed=candidate.format_valid_rate >= config.min_format_valid_rate,
              reason=(f"format-valid rate {candidate.format_valid_rate:.3f} "
                      f"vs floor {config.min_format_valid_rate:.3f}")),
    ]
    checks += [baseline_check(b, candidate, baselines.get(b), config, candidate_name=name) for b in config.baselines]
    checks += [regression_check(r, candidate, baselines.get(r), candidate_name=name, paired=paired.get(r),
                                alpha=config.paired_alpha) for r in config.not_worse_than if r != name]
    if champion is None:
        return Decision(promote=all(c.passed for c in checks), checks=checks, first_promotion=True)
    need = champion.accuracy - config.accuracy_tolerance
    checks.append(Check(
        name="accuracy", passed=candidate.accuracy >= need - 1e-12,
        reason=(f"accuracy {candidate.accuracy:.3f} vs champion {champion.accuracy:.3f} "
                f"(tolerance {config.accuracy_tolerance:.3f}: needs >= {need:.3f}); "
                f"{name} {candidate.shown}, champion {champion.shown}"),
    ))
    budget = config.max_cost_ratio * champion.cost_mean
    if champion.cost_mean > 0:
        ratio = candidate.cost_mean / champion.cost_mean
    else:
        ratio = 0.0 if candidate.cost_mean == 0 else float("inf")
    checks.append(Check(
        name="cost", passed=candidate.cost_mean <= budget + 1e-15,
        reason=(f"mean cost ${candidate.cost_mean:.3g} vs champion ${champion.cost_mean:.3g} "
                f"(ratio {ratio:.3g}, allowed <= {config.max_cost_ratio:g})"),
    ))
    return Decision(promote=all(c.passed for c in checks), checks=checks)
