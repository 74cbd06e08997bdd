"""The verl reward module returns the reward contract's values for recorded trajectories: each
rollout's call waits for its group, and verl's GRPO (scores centred per group, not rescaled)
then trains on exactly `group_advantages(group_rewards(...))`."""

from __future__ import annotations

import asyncio

import pytest
import torch

from toolorchestra.episodes.reward import group_advantages, group_rewards
from toolorchestra.rl.verl import reward as verl_reward


def record(group, correct, cost, *, valid=True, calls=1, size=4):
    return {"group": group, "session": None, "group_size": size, "instance_id": "i", "correct": correct,
            "format_valid": valid, "answered": True, "valid": valid, "turns": 2, "details": {},
            "metrics": {"cost": cost, "latency": 1.0 + cost, "calls/search": float(calls)},
            "preference": {"accuracy": 1.0, "cost": 0.5, "calls/search": -0.2}}


async def score_all(records, **kwargs):
    return await asyncio.gather(*(verl_reward.compute_score("toolorchestra/qa", "", None, {"orchestra": r}, **kwargs)
                                  for r in records))


def test_recorded_group_gets_the_contracts_rewards_and_advantages():
    records = [record("g", True, 0.01, calls=1), record("g", True, 0.03, calls=3), record("g", False, 0.0, calls=0),
               record("g", False, 0.02, valid=False)]
    scores = asyncio.run(score_all(records))
    # The invalid rollout is a wrong one of the group: reward 0, its cost on the scale.
    rewards = group_rewards([r["metrics"] for r in records], [r["correct"] and r["valid"] for r in records],
                            records[0]["preference"])
    advantages = group_advantages(rewards)
    assert [s["reward"] for s in scores] == pytest.approx(rewards)
    assert [s["score"] for s in scores] == pytest.approx(advantages)
    assert scores[3]["score"] < 0 and scores[3]["valid"] == 0.0  # invalid: wrong, pushed down
    assert [s["acc"] for s in scores] == [1.0, 1.0, 0.0, 0.0]
    # verl's GRPO with norm_adv_by_std_in_grpo=false centres the scores per uid: the contract survives.
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_scores = torch.zeros(4, 3)
    token_scores[:, -1] = torch.tensor([s["score"] for s in scores])
    verl_adv, _ = compute_grpo_outcome_advantage(token_scores, torch.ones(4, 3), index=["g"] * 4,
                                                 norm_adv_by_std_in_grpo=False)
    assert verl_adv[:, 0].tolist() == pytest.approx(advantages, abs=1e-6)


def test_right_right_invalid_invalid_is_trained_not_filtered():
    # Before: the invalid pair was dropped, the right pair tied, and the group was filtered.
    records = [record("rr", True, 0.01), record("rr", True, 0.01), record("rr", False, 0.01, valid=False),
               record("rr", True, 0.01, valid=False)]  # a "correct" but invalid rollout is still wrong
    scores = asyncio.run(score_all(records))
    assert [s["group_filtered"] for s in scores] == [0.0] * 4
    assert [round(s["score"], 3) for s in scores] == [0.866, 0.866, -0.866, -0.866]


def test_the_dead_band_comes_from_reward_kwargs():
    # Costs 1e-12 USD apart: inside the default band, so only accuracy separates the rollouts.
    records = [record("d", True, 1e-12), record("d", True, 2e-12), record("d", False, 0.0)]
    for r in records:
        r["group_size"] = 3
    default = asyncio.run(score_all(records))
    assert default[0]["reward"] == default[1]["reward"]
    exact = asyncio.run(score_all([{**r, "group": "d2"} for r in records],
                                  dead_band={"cost": {"absolute": 0.0, "relative": 0.0}}))
    assert exact[0]["reward"] > exact[1]["reward"]


def test_groups_are_kept_apart_and_a_flat_group_is_filtered():
    mixed = [record("a", True, 0.01, size=2), record("b", True, 0.05, size=2), record("a", False, 0.02, size=2),
             record("b", True, 0.05, size=2)]
    scores = asyncio.run(score_all(mixed))
    assert scores[0]["score"] > 0 > scores[2]["score"]
    assert scores[1]["score"] == scores[3]["score"] == 0.0 and scores[1]["group_filtered"] == 1.0
    assert verl_reward._LOCAL_BOARD.groups == {}  # released once every member has read its group


def test_an_incomplete_group_is_scored_after_the_timeout():
    lonely = [record("late", True, 0.01, size=3), record("late", False, 0.01, size=3)]
    scores = asyncio.run(score_all(lonely, timeout_s=0.2))
    assert scores[0]["score"] > 0 > scores[1]["score"]


def test_rows_without_our_record_are_rejected():
    with pytest.raises(ValueError, match="orchestra_agent"):
        asyncio.run(verl_reward.compute_score("x", "", None, {}))
