"""The ToolOrchestra reward and GRPO group advantages: one contract, written once.

Both trainer backends (TRL embedded, verl on Ray) and the evaluation scorer call these two
functions; adapters only reshape their inputs. Pure Python and ``math``, no numpy: a group is a
handful of rollouts, and this runs once per group per step.

Definition (paper Sec. 3)
-------------------------
A *group* is the set of rollouts the policy produced for one task under one preference vector
``P``. For every key ``k`` of ``P`` each rollout ``i`` has a raw value ``v[i, k]``:

============== ===================================================== ==================
key            raw value                                             orientation
============== ===================================================== ==================
``accuracy``   1.0 if the rollout is correct, else 0.0               higher is better
``calls/T``    number of calls to tool ``T`` (missing key -> 0)       as recorded
``models/M``   calls served by expert model ``M`` (missing key -> 0)  as recorded
``cost``       USD spent by the rollout (required)                    negated
``latency``    seconds taken by the rollout (required)                negated
============== ===================================================== ==================

``cost`` and ``latency`` are negated so that a cheaper / faster rollout scores higher under a
positive weight. Each key is then min-max normalised **across the whole group** (all rollouts,
right and wrong, exactly as the definition reads; wrong rollouts still shape the scale)::

    m[i, k] = (v[i, k] - min_j v[j, k]) / (max_j v[j, k] - min_j v[j, k])     in [0, 1]

A key whose range is inside its **dead band** carries no information inside the group and is
**skipped** (a range of 0 always is)::

    max_j v[j, k] - min_j v[j, k]  <=  max(absolute_k, relative_k * max_j |v[j, k]|)

so 1 ms of latency jitter or 1e-12 USD never becomes a full reward unit. The bands are per key
family, in the metric's own unit (``DEFAULT_DEAD_BAND``; GRPO settings pass them to both
backends):

============ ============================== ============ =====================================
key          absolute                       relative     why
============ ============================== ============ =====================================
``cost``     1e-9 USD                       1%           an episode costs ~1e-5..1e-2 USD here
``latency``  0.01 s                         1%           CPU timing jitter is milliseconds
``calls/*``  0 (counts are exact)           0            one call more is a real difference
``models/*`` (the ``calls`` band)           (counts)     likewise: a count of calls
``accuracy`` none (0 or 1)                  none
============ ============================== ============ =====================================

``NO_DEAD_BAND`` (``{}``) gives exact min-max normalisation. With absolute bands only, adding a
constant to a metric changes nothing; a relative band is relative to the group's largest
magnitude, so it is not shift-invariant (cost and latency are never negative). The reward is
then::

    reward[i] = 0.0                          if rollout i is wrong
    reward[i] = sum_k P[k] * m[i, k]         if rollout i is right

so ``sum of negative weights <= reward <= sum of positive weights``, and ``|reward| <= sum |P|``.
Weights may be negative: "do not use web search" is a negative weight on ``calls/web_search``,
which lowers the reward of every correct rollout that called it more than the least-calling one.
The ``accuracy`` value comes only from ``correct``; an ``accuracy`` entry in a metrics mapping is
ignored, and so is every metric that ``P`` does not name.

Rollouts with an invalid format or no answer stay in the group **as wrong** (their caller passes
``correct=False``): they get 0, count as 0 in the accuracy term and their cost and latency shape
the scale, as in the released code, so a group [right, right, invalid, invalid] trains the right
ones instead of being dropped.

Advantages: ``a[i] = clip((r[i] - mean(r)) / (std(r) + 1e-6), -clip, clip)`` with the sample
standard deviation (ddof=1). A group with fewer than two rollouts, or whose std is ``<= min_std``,
returns ``None``: it gives no useful gradient and is filtered out of the batch.

Where this departs from the released code
-----------------------------------------
- The released code normalises cost and latency without negating them, so under a positive
  weight a *more* expensive rollout scored higher; here they are negated (cheaper is better).
- The released code divides by ``max - min`` even when it is zero (a NaN / inf reward when, say,
  no rollout called a tool); here a constant term is skipped.
- The released code has no dead band: any difference, however small, is a full reward unit.
- Bad input (a missing cost, a NaN latency, a misspelt preference key) is rejected with a
  :class:`RewardInputError` (a ``ValueError``) naming the rollout and key, instead of being
  silently read as 0.

Table of cases (weights ``P``; rollouts as (correct, metrics))
--------------------------------------------------------------
==================================  ======================================  ===================
P                                   group                                   rewards
==================================  ======================================  ===================
accuracy: 1                         right, wrong                            1.0, 0.0
accuracy: 1                         right, right (accuracy constant)        0.0, 0.0
cost: 1                             right $1, right $3, wrong $5            1.0, 0.5, 0.0
cost: 1                             right $2, right $2 (constant)           0.0, 0.0
calls/web_search: -1                right 0 calls, right 2 calls            0.0, -1.0
calls/web_search: 1                 right, right (key missing: 0 and 0)     0.0, 0.0
latency: 1                          right 10 s, right 10.001 s (dead band)  0.0, 0.0
any                                 all wrong                               all 0.0
any                                 one rollout, right                      0.0 (all constant)
==================================  ======================================  ===================

Examples:

>>> group_rewards(
...     [{"cost": 1.0}, {"cost": 3.0}, {"cost": 5.0}],
...     [True, True, False],
...     {"accuracy": 1.0, "cost": 1.0},
... )
[2.0, 1.5, 0.0]
>>> group_rewards(
...     [{"calls/web_search": 0}, {"calls/web_search": 2}, {}],
...     [True, True, True],
...     {"calls/web_search": -1.0},
... )
[0.0, -1.0, 0.0]
>>> group_rewards([{"cost": 1.0}], [True], {"accuracy": 1.0, "cost": 1.0})
[0.0]
>>> group_rewards([{"latency": 10.0}, {"latency": 10.001}], [True, True], {"latency": 1.0})
[0.0, 0.0]
>>> group_rewards([{"latency": 10.0}, {"latency": 10.001}], [True, True], {"latency": 1.0},
...               dead_band=NO_DEAD_BAND)
[1.0, 0.0]
>>> group_rewards([{}], [True], {"latency": 1.0})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
toolorchestra.episodes.reward.RewardInputError: metrics[0] has no 'latency' value; ...
>>> [round(a, 4) for a in group_advantages([1.0, 0.0, 0.0, 1.0])]
[0.866, -0.866, -0.866, 0.866]
>>> group_advantages([0.5, 0.5, 0.5]) is None   # no spread: filtered out
True
>>> group_advantages([1.0]) is None             # a single rollout: filtered out
True
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from toolorchestra.core.errors import OrchestraError

__all__ = ["DEFAULT_DEAD_BAND", "NO_DEAD_BAND", "DeadBand", "RewardInputError", "check_preference",
           "group_advantages", "group_rewards"]

ACCURACY = "accuracy"
COST = "cost"
LATENCY = "latency"
CALLS_PREFIX = "calls/"
MODELS_PREFIX = "models/"
COUNT_PREFIXES = (CALLS_PREFIX, MODELS_PREFIX)
"""Count keys: `calls/<tool>` and `models/<alias>` (0 when missing, the `calls` dead band)."""
# Lower is better for these: their values are negated before normalising.
_NEGATED = frozenset({COST, LATENCY})
_ACCEPTED_FORMS = "'accuracy', 'cost', 'latency', 'calls/<tool name>' or 'models/<model alias>'"
# Added to the std so a spread just above min_std cannot blow the advantage up (as in GRPO).
_STD_EPS = 1e-6


class RewardInputError(OrchestraError, ValueError):
    """The metrics, outcomes or preference handed to the reward are malformed."""


def _as_finite(value: object, where: str) -> float:
    # bool is an int subclass; a True "cost" is a bug upstream, not 1 USD.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RewardInputError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    out = float(value)
    if not math.isfinite(out):
        raise RewardInputError(f"{where} must be finite, got {out!r}")
    return out


@dataclass(frozen=True)
class DeadBand:
    """A group range at most ``max(absolute, relative * largest magnitude)`` counts as constant.
    ``absolute`` is in the metric's unit (USD, seconds, calls); ``relative`` is a fraction."""

    absolute: float = 0.0
    relative: float = 0.0

    def __post_init__(self) -> None:
        for name in ("absolute", "relative"):
            value = _as_finite(getattr(self, name), f"dead band {name}")
            if value < 0:
                raise RewardInputError(f"dead band {name} must be >= 0, got {value}")


# Keys of a dead-band mapping: `calls` covers every `calls/<tool>` and `models/<alias>` (counts).
CALLS = "calls"
DEAD_BAND_KEYS = (COST, LATENCY, CALLS)
DEFAULT_DEAD_BAND: Mapping[str, DeadBand] = {
    COST: DeadBand(absolute=1e-9, relative=0.01),      # USD
    LATENCY: DeadBand(absolute=0.01, relative=0.01),   # seconds
    CALLS: DeadBand(),                                 # counts: any difference is real
}
NO_DEAD_BAND: Mapping[str, DeadBand] = {}


def check_preference(preference: Mapping[str, float]) -> dict[str, float]:
    """The weights of a preference vector, checked (known keys, finite weights)."""
    if not isinstance(preference, Mapping):
        raise RewardInputError(
            f"preference must be a mapping of key -> weight, got {type(preference).__name__}"
        )
    if not preference:
        raise RewardInputError(f"preference is empty; give weights over {_ACCEPTED_FORMS}")
    weights: dict[str, float] = {}
    unknown = []
    for key, weight in preference.items():
        known = key in (ACCURACY, COST, LATENCY) or (
            isinstance(key, str) and any(key.startswith(p) and len(key) > len(p) for p in COUNT_PREFIXES)
        )
        if not known:
            unknown.append(key)
            continue
        weights[key] = _as_finite(weight, f"preference[{key!r}]")
    if unknown:
        raise RewardInputError(
            f"preference has unknown key(s) {sorted(map(repr, unknown))}; accepted forms are "
            f"{_ACCEPTED_FORMS}"
        )
    return weights


def _check_correct(correct: Sequence[bool], n: int) -> list[bool]:
    if len(correct) != n:
        raise RewardInputError(
            f"metrics has {n} rollout(s) but correct has {len(correct)}; "
            "give one outcome per rollout"
        )
    out = []
    for i, flag in enumerate(correct):
        # Accepts bool, numpy.bool_ and 0/1; rejects strings such as "False", which are truthy.
        if isinstance(flag, str) or flag not in (True, False):
            raise RewardInputError(f"correct[{i}] must be a bool, got {flag!r}")
        out.append(bool(flag))
    return out


def _raw_values(
    key: str, metrics: Sequence[Mapping[str, float]], correct: list[bool]
) -> list[float]:
    if key == ACCURACY:
        return [1.0 if ok else 0.0 for ok in correct]
    values = []
    for i, row in enumerate(metrics):
        if key in row:
            value = _as_finite(row[key], f"metrics[{i}][{key!r}]")
        elif key.startswith(COUNT_PREFIXES):
            value = 0.0  # a tool (or model) the rollout never called
        else:
            raise RewardInputError(
                f"metrics[{i}] has no {key!r} value; every rollout must record {key!r} when the "
                f"preference weights it (only 'calls/<tool>' and 'models/<alias>' default to 0)"
            )
        values.append(-value if key in _NEGATED else value)
    return values


def _check_dead_band(dead_band: Mapping[str, DeadBand] | None) -> Mapping[str, DeadBand]:
    if dead_band is None:
        return DEFAULT_DEAD_BAND
    if not isinstance(dead_band, Mapping):
        raise RewardInputError(f"dead_band must be a mapping of key -> DeadBand, got {type(dead_band).__name__}")
    for key, band in dead_band.items():
        if key not in DEAD_BAND_KEYS:
            raise RewardInputError(f"dead_band has unknown key {key!r}; accepted: {list(DEAD_BAND_KEYS)}")
        if not isinstance(band, DeadBand):
            raise RewardInputError(f"dead_band[{key!r}] must be a DeadBand, got {type(band).__name__}")
    return dead_band


def _band_of(key: str, dead_band: Mapping[str, DeadBand]) -> DeadBand | None:
    if key.startswith(COUNT_PREFIXES):
        return dead_band.get(CALLS)
    return dead_band.get(key)  # accuracy has none: it is 0 or 1


def _min_max(values: list[float], band: DeadBand | None = None) -> list[float] | None:
    """Values scaled to [0, 1]; ``None`` when their range is inside the dead band (all equal
    included): the term is skipped."""
    lo, hi = min(values), max(values)
    if hi == lo:
        return None
    span = hi - lo
    if band is not None and span <= max(band.absolute, band.relative * max(abs(lo), abs(hi))):
        return None
    if math.isinf(span):
        # Two finite values of opposite sign near the float limit: halve first so the span is
        # finite (exact for normal floats), rather than reading every rollout as 0.
        lo, span = lo / 2, hi / 2 - lo / 2
        return [(v / 2 - lo) / span for v in values]
    return [(v - lo) / span for v in values]


def group_rewards(
    metrics: Sequence[Mapping[str, float]],
    correct: Sequence[bool],
    preference: Mapping[str, float],
    dead_band: Mapping[str, DeadBand] | None = None,
) -> list[float]:
    """Rewards of one group of rollouts of the same task (see the module docstring).

    Args:
        metrics: one mapping per rollout with keys such as ``calls/<tool>``, ``models/<alias>``,
            ``cost`` (USD) and ``latency`` (seconds). Only the keys that ``preference`` names are read.
        correct: one outcome per rollout.
        preference: weight per key; keys are ``accuracy``, ``cost``, ``latency``,
            ``calls/<tool>`` or ``models/<alias>``. Weights may be negative (an avoided tool or model).
        dead_band: per key family (``cost``, ``latency``, ``calls``), the range under which a
            metric counts as constant; ``None``: ``DEFAULT_DEAD_BAND``, ``NO_DEAD_BAND``: exact.

    Returns:
        One reward per rollout, in order: 0.0 for a wrong rollout.

    Raises:
        RewardInputError (a ValueError): lengths differ, a preference key is unknown, a required
            ``cost`` / ``latency`` value is missing, or a value or weight is not a finite number.
    """
    if isinstance(metrics, (Mapping, str)):
        raise RewardInputError(
            f"metrics must be a sequence with one mapping per rollout, got {type(metrics).__name__}"
        )
    weights = check_preference(preference)
    bands = _check_dead_band(dead_band)
    outcomes = _check_correct(correct, len(metrics))
    for i, row in enumerate(metrics):
        if not isinstance(row, Mapping):
            raise RewardInputError(f"metrics[{i}] must be a mapping, got {type(row).__name__}")
    rewards = [0.0] * len(metrics)
    if not metrics:
        return rewards
    # Read and validate every weighted key before the early exit below, so bad data fails loudly
    # even in an all-wrong group.
    normalised = {key: _min_max(_raw_values(key, metrics, outcomes), _band_of(key, bands)) for key in weights}
    terms = [(weights[key], m) for key, m in normalised.items() if m is not None]
    for i, ok in enumerate(outcomes):
        if ok:
            rewards[i] = math.fsum(w * m[i] for w, m in terms)
    return rewards


def group_advantages(
    rewards: Sequence[float], clip: float = 3.0, min_std: float = 0.1
) -> list[float] | None:
    """GRPO advantages of one group: clipped z-scores, or ``None`` when the group is filtered.

    ``a[i] = clip((r[i] - mean) / (std + 1e-6), -clip, clip)``, std with ddof=1. Returns ``None``
    when there are fewer than two rollouts or ``std <= min_std``.

    Raises:
        RewardInputError (a ValueError): a reward is not finite, ``clip <= 0`` or ``min_std < 0``.
    """
    clip = _as_finite(clip, "clip")
    min_std = _as_finite(min_std, "min_std")
    if clip <= 0:
        raise RewardInputError(f"clip must be > 0, got {clip}")
    if min_std < 0:
        raise RewardInputError(f"min_std must be >= 0, got {min_std}")
    values = [_as_finite(r, f"rewards[{i}]") for i, r in enumerate(rewards)]
    n = len(values)
    if n < 2:
        return None
    try:
        mean = math.fsum(values) / n
        deviations = [v - mean for v in values]
        std = math.sqrt(math.fsum(d * d for d in deviations) / (n - 1))
    except OverflowError:  # fsum raises on intermediate overflow instead of returning inf
        std = math.inf
    if not math.isfinite(std):
        raise RewardInputError(
            f"rewards are too large to standardise (std overflows); got max |r| = "
            f"{max(map(abs, values))!r}"
        )
    if std <= min_std:
        return None
    scale = std + _STD_EPS
    return [min(clip, max(-clip, d / scale)) for d in deviations]
