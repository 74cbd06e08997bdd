"""Filters: each drops what it should, with per-filter counts."""

from __future__ import annotations

import copy

import pytest
from helpers.domains import events_db

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.domain import Domain
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.evaluation import Trajectory
from toolorchestra.envs.task import dump_task
from toolorchestra.synthesis.filters import empty_solver, filter_tasks, golden_solver, resolve_solver
from toolorchestra.synthesis.procedural import synthesize_tasks


@pytest.fixture
def setup():
    domain = Domain("events", events_db())
    tasks, _ = synthesize_tasks(domain, 12, seed=9)
    return DomainEnv(domain), [dump_task(t) for t in tasks]


def test_each_filter_counts(setup):
    env, raw = setup
    broken = copy.deepcopy(raw[0])
    broken["id"] = "broken"
    broken["evaluation_criteria"]["actions"][0]["arguments"] = {"nope": 1}
    unknown = copy.deepcopy(raw[1])
    unknown["id"] = "unknown"
    unknown["evaluation_criteria"]["actions"][0]["name"] = "launch_rocket"
    trivial = {"id": "trivial", "user_scenario": {"instructions": "hello"},
               "evaluation_criteria": {"actions": [], "communicate_info": [], "reward_basis": ["DB", "ACTION"]}}
    dup = copy.deepcopy(raw[2])
    dup["id"] = "dup"
    invalid = {"id": "invalid", "evaluation_criteria": {}}
    result = filter_tasks([*raw, broken, unknown, trivial, dup, invalid, 42], env)
    counts = result.counts
    assert counts == {"input": 18, "dropped_invalid": 2, "dropped_unknown_tool": 1, "dropped_replay_error": 1,
                      "dropped_trivial": 1, "dropped_duplicate": 1, "dropped_pass_at_k": 0, "kept": 12}
    assert result.dropped["replay_error"] == ["broken"] and "golden action 0" in result.reasons["broken"]
    assert result.dropped["invalid"] == ["invalid", "#17"]
    assert set(result.golden_hashes) == {t["id"] for t in raw}


def test_pass_at_k_with_pluggable_solver(setup):
    env, raw = setup
    assert filter_tasks(raw, env, solver=golden_solver, k=2).counts["kept"] == 12
    assert filter_tasks(raw, env, solver=empty_solver, k=3).counts["dropped_pass_at_k"] == 12
    calls = []

    def flaky(task, env):  # succeeds on the second attempt only
        calls.append(task.id)
        if calls.count(task.id) < 2:
            raise RuntimeError("solver crashed")
        return golden_solver(task, env)

    assert filter_tasks(raw[:3], env, solver=flaky, k=2).counts["kept"] == 3
    assert filter_tasks(raw[:3], env, solver=lambda t, e: Trajectory(), k=0).counts["kept"] == 3  # k=0: off
    with pytest.raises(ConfigError, match="unknown solver 'gpt'; known"):
        resolve_solver("gpt")
