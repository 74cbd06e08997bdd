"""The promotion gate: may a candidate replace the champion? A pure function of two evaluations.

The gate reads the candidate's and the champion's metrics **from the same evaluation** (same task
list, same tools and prices; the `evaluate` stage re-runs the champion beside the candidate) and
moves `champion` only when the candidate is

1. at least as accurate: `candidate.accuracy >= champion.accuracy - accuracy_tolerance`;
2. no more expensive than allowed: `candidate.cost_mean <= max_cost_ratio * champion.cost_mean`
   (a champion that cost nothing admits only a candidate that costs nothing);
3. above the absolute floors `min_accuracy` and `min_format_valid_rate` (these also apply to the
   first promotion, when there is no champion).

Accuracy and cost are pooled over the benchmarks named in `benchmarks` (all when None), weighted
by their task counts. Every check yields a reason, passed or not, so a refusal says exactly why.

>>> from toolorchestra.registry.gate import GateConfig, Scores, decide
>>> champ = Scores(accuracy=0.60, cost_mean=0.010, format_valid_rate=1.0, n=50)
>>> decide(Scores(accuracy=0.59, cost_mean=0.004, format_valid_rate=1.0, n=50), champ,
...        GateConfig(accuracy_tolerance=0.02, max_cost_ratio=1.0)).promote
True
>>> d = decide(Scores(accuracy=0.50, cost_mean=0.004, format_valid_rate=1.0, n=50), champ, GateConfig())
>>> d.promote, d.failed
(False, ['accuracy'])
>>> decide(Scores(accuracy=0.3, cost_mean=1.0, format_valid_rate=1.0, n=5), None, GateConfig()).reasons[0]
'first promotion: there is no champion yet'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", frozen=True)


class GateConfig(BaseModel):
    model_config = _STRICT

    accuracy_tolerance: float = Field(0.0, ge=0.0, le=1.0, description="accuracy points the candidate may lose")
    max_cost_ratio: float = Field(1.0, gt=0.0, description="candidate mean cost / champion mean cost, at most")
    min_accuracy: float = Field(0.0, ge=0.0, le=1.0)
    min_format_valid_rate: float = Field(0.0, ge=0.0, le=1.0)
    benchmarks: list[str] | None = Field(None, description="benchmarks the gate reads (None: all)")


class Scores(BaseModel):
    """What the gate reads of one method's evaluation."""

    model_config = ConfigDict(frozen=True)

    accuracy: float
    cost_mean: float
    format_valid_rate: float = 1.0
    latency_mean: float = 0.0
    n: int = 0


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


def pooled_scores(per_benchmark: Mapping[str, Mapping[str, Any]], benchmarks: list[str] | None) -> Scores:
    """Scores pooled (task-weighted) over some benchmarks of a method's metrics from metrics.json
    (`{benchmark: {n, accuracy, cost_mean, ...}}`, with `overall`)."""
    if benchmarks is None:
        m = per_benchmark["overall"]
        return Scores(accuracy=m["accuracy"], cost_mean=m["cost_mean"], format_valid_rate=m["format_valid_rate"],
                      latency_mean=m["latency_mean"], n=m["n"])
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


def decide(candidate: Scores, champion: Scores | None, config: GateConfig) -> Decision:
    """The gate's decision with one check per rule (module docstring)."""
    checks = [
        Check(name="min_accuracy", passed=candidate.accuracy >= config.min_accuracy,
              reason=f"accuracy {candidate.accuracy:.3f} vs floor {config.min_accuracy:.3f}"),
        Check(name="min_format_valid_rate", passed=candidate.format_valid_rate >= config.min_format_valid_rate,
              reason=(f"format-valid rate {candidate.format_valid_rate:.3f} "
                      f"vs floor {config.min_format_valid_rate:.3f}")),
    ]
    if candidate.n == 0:
        checks.append(Check(name="evaluated", passed=False, reason="the candidate was evaluated on no task"))
    if champion is None:
        return Decision(promote=all(c.passed for c in checks), checks=checks, first_promotion=True)
    need = champion.accuracy - config.accuracy_tolerance
    checks.append(Check(
        name="accuracy", passed=candidate.accuracy >= need - 1e-12,
        reason=(f"accuracy {candidate.accuracy:.3f} vs champion {champion.accuracy:.3f} "
                f"(tolerance {config.accuracy_tolerance:.3f}: needs >= {need:.3f})"),
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
