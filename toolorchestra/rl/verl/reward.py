"""verl `custom_reward_function`: the project's reward contract, per group, for verl's GRPO.

verl scores each trajectory on its own (`compute_score(data_source, solution_str, ground_truth,
extra_info)`, one call per rollout, streamed as rollouts finish), but the contract is defined over
the group of rollouts of one task: metrics are min-max normalised across the group. So each call
posts its rollout's record (written by the `orchestra_agent` loop into `extra_info["orchestra"]`)
to a `GroupBoard` and waits until the whole group (`rollout.n` rollouts of the same prompt uid) has
arrived; then every member computes, from the same group:

    rewards    = group_rewards(metrics, valid and correct, preference, dead_band)
    advantages = group_advantages(rewards, clip, min_std)

over every rollout of the group: an invalid one (malformed call or no answer) counts as wrong, as
in the released code. It returns its advantage as the score (0 in a filtered group), with the
reward, accuracy and validity as extra info. With `algorithm.adv_estimator=grpo` and
`algorithm.norm_adv_by_std_in_grpo=false` verl's advantage is `score - mean(score)` over the group,
and the scores' group mean is 0 (z-scores sum to 0), so verl trains on exactly the contract's
advantages, as the TRL backend does. `dead_band` comes from the GRPO settings
(`reward_kwargs.dead_band`, `{cost|latency|calls: {absolute, relative}}`).

The board is in-process when Ray is not initialised (tests, a single process), and a named Ray
actor otherwise, so reward workers in different processes meet. A group that does not complete
within `timeout_s` (a sibling crashed) is scored with the members that arrived.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from toolorchestra.episodes.reward import DeadBand, group_advantages, group_rewards

log = logging.getLogger(__name__)
BOARD_NAME = "orchestra_group_board"


class GroupBoard:
    """Collects the records of a group's rollouts and releases them when the group is complete."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[str, Any]] = {}

    async def submit(self, key: str, size: int, record: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
        group = self.groups.setdefault(key, {"records": [], "event": asyncio.Event(), "reads": 0, "created": time.time()})
        group["records"].append(record)
        if len(group["records"]) >= size:
            group["event"].set()
        try:
            await asyncio.wait_for(group["event"].wait(), timeout=timeout_s)
        except TimeoutError:
            log.warning("group %s complete with %d of %d rollouts after %.0fs", key, len(group["records"]), size, timeout_s)
            group["event"].set()
        records = list(group["records"])
        group["reads"] += 1
        if group["reads"] >= len(group["records"]):
            self.groups.pop(key, None)  # everyone has read it; a later step may reuse the uid
        return records


_LOCAL_BOARD: GroupBoard | None = None
_RAY_BOARD: Any = None


def _ray_board() -> Any:
    global _RAY_BOARD
    if _RAY_BOARD is None:
        import ray

        board = ray.remote(num_cpus=0)(GroupBoard)
        _RAY_BOARD = board.options(name=BOARD_NAME, get_if_exists=True,
                                   max_concurrency=10_000).remote()
    return _RAY_BOARD


async def _submit(key: str, size: int, record: dict[str, Any], timeout_s: float) -> list[dict[str, Any]]:
    global _LOCAL_BOARD
    try:
        import ray

        use_ray = ray.is_initialized()
    except ImportError:  # pragma: no cover - ray is a dependency
        use_ray = False
    if use_ray:
        return await _ray_board().submit.remote(key, size, record, timeout_s)
    if _LOCAL_BOARD is None:
        _LOCAL_BOARD = GroupBoard()
    return await _LOCAL_BOARD.submit(key, size, record, timeout_s)


def dead_bands(raw: Mapping[str, Any] | None) -> dict[str, DeadBand] | None:
    """`reward_kwargs.dead_band` (plain or OmegaConf mappings) as the reward's bands; None: defaults."""
    if raw is None:
        return None
    return {str(key): DeadBand(absolute=float(band.get("absolute", 0.0)), relative=float(band.get("relative", 0.0)))
            for key, band in raw.items()}


def score_group(records: list[dict[str, Any]], me: int, *, clip: float, min_std: float,
                dead_band: Mapping[str, DeadBand] | None = None) -> dict[str, Any]:
    """The contract's reward and advantage of `records[me]` within its group."""
    preference = records[me]["preference"]
    rewards = group_rewards([r["metrics"] for r in records], [bool(r["valid"]) and bool(r["correct"]) for r in records],
                            preference, dead_band)
    advantages = group_advantages(rewards, clip=clip, min_std=min_std)
    mine = records[me]
    return {
        "score": float(advantages[me]) if advantages is not None else 0.0, "reward": float(rewards[me]),
        "acc": float(mine["correct"]), "valid": float(mine["valid"]), "format_valid": float(mine["format_valid"]),
        "cost": float(mine["metrics"].get("cost", 0.0)), "latency": float(mine["metrics"].get("latency", 0.0)),
        "group_filtered": float(advantages is None),
    }


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                        *, clip: float = 3.0, min_std: float = 0.1, timeout_s: float = 3600.0,
                        dead_band: Mapping[str, Any] | None = None, **_: Any) -> dict[str, Any]:
    """verl's reward entry point (async; verl awaits it). See the module docstring."""
    record = (extra_info or {}).get("orchestra")
    if record is None:
        raise ValueError("extra_info has no 'orchestra' record: rows must use agent_name=orchestra_agent "
                         "(toolorchestra.rl.verl.agent_loop)")
    record = {**record, "_token": uuid.uuid4().hex}
    records = await _submit(record["group"], int(record["group_size"]), record, timeout_s)
    me = next(i for i, r in enumerate(records) if r["_token"] == record["_token"])
    return score_group(records, me, clip=clip, min_std=min_std, dead_band=dead_bands(dead_band))
