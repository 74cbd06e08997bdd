"""The three criteria: execution correctness, process fidelity, operation completeness."""

from __future__ import annotations

import pytest

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.evaluation import ToolCall, Trajectory, communicated, evaluate, normalize
from toolorchestra.envs.state import BaseDb
from toolorchestra.envs.task import Task


@pytest.fixture
def env(unseen):
    domain = Domain("warehouse", unseen)
    return Engine(domain.tool_specs(), domain.layouts), BaseDb(domain.db, domain.layouts)


def make_task(**criteria) -> Task:
    actions = [
        {"action_id": "a0", "name": "find_customer_by_profile_contact_email", "arguments": {"email": "user1@shop.test"}},
        {"action_id": "a1", "name": "get_order_details", "arguments": {"order_code": "ORD-0003"}},
        {"action_id": "a2", "name": "update_order_shipping_carrier",
         "arguments": {"order_code": "ORD-0003", "carrier": "dhl"}},
    ]
    return Task(id="t", user_scenario={"instructions": "x"}, evaluation_criteria={
        "actions": actions, "communicate_info": ["21"], "reward_basis": ["DB", "ACTION", "COMMUNICATE"], **criteria})


def score(env, task, calls, messages):
    engine, base = env
    return evaluate(task, Trajectory(tool_calls=[ToolCall(**c) for c in calls], messages=messages),
                    engine=engine, base=base)


def calls_of(task):
    return [{"name": a.name, "arguments": a.arguments} for a in task.actions]


def test_golden_trajectory_scores_one(env):
    task = make_task()
    result = score(env, task, calls_of(task), ["Your order total is 21.00 EUR; carrier changed to DHL."])
    assert (result.db, result.action, result.communicate, result.reward) == (1.0, 1.0, 1.0, 1.0)
    assert result.expected_hash == result.actual_hash


def test_skipped_write(env):
    task = make_task()
    result = score(env, task, calls_of(task)[:2], ["total 21"])
    assert result.db == 0.0 and result.action == 0.0 and result.communicate == 1.0 and result.reward == 0.0
    assert result.unmatched_actions == ["a2"]


def test_wrong_field_changed(env):
    task = make_task()
    calls = calls_of(task)[:2] + [{"name": "update_order_state", "arguments": {"order_code": "ORD-0003", "state": "open"}}]
    result = score(env, task, calls, ["total 21"])
    assert result.db == 0.0 and result.action == 0.0 and result.communicate == 1.0


def test_wrong_value_and_extra_reads(env):
    task = make_task()
    wrong = calls_of(task)[:2] + [{"name": "update_order_shipping_carrier",
                                   "arguments": {"order_code": "ORD-0003", "carrier": "ups"}}]
    assert score(env, task, wrong, ["21"]).db == 0.0
    extra = [{"name": "get_product_details", "arguments": {"id": 1}}, *calls_of(task),
             {"name": "get_order_details", "arguments": {"order_code": "NOPE"}}]  # refused: no effect
    assert score(env, task, extra, ["21"]).reward == 1.0


def test_omitted_communicate_value(env):
    task = make_task()
    result = score(env, task, calls_of(task), ["Done, carrier changed.", "It costs 210 or 2.1"])
    assert result.db == 1.0 and result.action == 1.0 and result.communicate == 0.0
    assert result.missing_communicate == ["21"]


def test_compare_args_and_reward_basis(env):
    task = make_task(reward_basis=["ACTION"])
    task.evaluation_criteria.actions[0].compare_args = []
    task.evaluation_criteria.actions[1].compare_args = ["order_code"]
    calls = calls_of(task)
    calls[0] = {"name": calls[0]["name"], "arguments": {"email": "someone@else"}}
    calls[1] = {"name": calls[1]["name"], "arguments": {"order_code": "ORD-0003", "verbose": True}}
    result = score(env, task, calls, [])
    assert result.action == 1.0 and result.db is None and result.communicate is None and result.reward == 1.0
    assert score(env, make_task(reward_basis=["DB", "NL_ASSERTION"]), calls_of(task), []).skipped == ["NL_ASSERTION"]


@pytest.mark.parametrize(
    ("info", "said", "ok"),
    [
        ("750000.0", "Your balance is 750,000 HUF.", True),
        ("12.50", "it is 12.5", True),
        ("Frozen", "The account is now FROZEN.", True),
        ("100", "you owe 1000", False),
        ("1.5", "rate 1.55%", False),
        ("Café  Nord", "at cafe\u0301 nord", True),  # combining accent composes (NFKC)
        ("Café Nord", "at cafe nord", False),
        ("Café Nord", "at CAFÉ   nord!", True),
    ],
)
def test_normalisation(info, said, ok):
    assert communicated(info, normalize(said)) is ok


def test_trajectory_from_messages():
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "2", "name": "g", "arguments": {"b": 2}}]},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "done 5"},
    ]
    traj = Trajectory.from_messages(msgs)
    assert [(c.name, c.arguments) for c in traj.tool_calls] == [("f", {"a": 1}), ("g", {"b": 2})]
    assert traj.messages == ["done 5"]
