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


def test_reads_need_not_repeat_identical_arguments(env):
    # Before: every golden action, reads included, had to be repeated with identical arguments, so
    # reaching the same customer and order another way left a0 and a1 unmatched (action 0).
    task = make_task()
    calls = [{"name": "get_customer_details", "arguments": {"customer_no": "C101"}},  # user1's record
             {"name": "list_orders_by_buyer_customer_no", "arguments": {"customer_id": "C101"}},  # ORD-0003/4
             calls_of(task)[2]]
    result = score(env, task, calls, ["21"])
    assert (result.action, result.unmatched_actions, result.reward) == (1.0, [], 1.0)


def test_a_read_of_other_entries_is_unmatched(env):
    task = make_task()
    calls = [{"name": "get_customer_details", "arguments": {"customer_no": "C102"}},  # not user1
             {"name": "get_order_details", "arguments": {"order_code": "ORD-0004"}}]
    assert score(env, task, calls, ["21"]).unmatched_actions == ["a0", "a1", "a2"]
    # Writing ORD-0003 operates on it too, so the golden read of ORD-0003 is matched.
    assert score(env, task, [*calls, calls_of(task)[2]], ["21"]).unmatched_actions == ["a0"]
    refused = [{"name": "get_order_details", "arguments": {"order_code": "NOPE"}}, *calls_of(task)[1:]]
    assert score(env, task, refused, ["21"]).unmatched_actions == ["a0"]  # a refused call reaches nothing


def test_writes_are_matched_on_the_record_they_touch(env):
    task = make_task()
    other_value = [*calls_of(task)[:2], {"name": "update_order_shipping_carrier",
                                         "arguments": {"order_code": "ORD-0003", "carrier": "ups"}}]
    result = score(env, task, other_value, ["21"])
    assert result.action == 1.0 and result.db == 0.0  # same entry operated on; the DB check sees the value
    other_record = [*calls_of(task)[:2], {"name": "update_order_shipping_carrier",
                                          "arguments": {"order_code": "ORD-0004", "carrier": "dhl"}}]
    assert score(env, task, other_record, ["21"]).unmatched_actions == ["a2"]
    other_tool = [*calls_of(task)[:2], {"name": "update_order_state", "arguments": {"order_code": "ORD-0003",
                                                                                    "state": "open"}}]
    assert score(env, task, other_tool, ["21"]).unmatched_actions == ["a2"]


def test_path_parameters_are_part_of_a_write_target(env):
    update = {"name": "update_order_parcels_status",
              "arguments": {"order_code": "ORD-0003", "parcel_key": "PCL-0003-0", "status": "delivered"}}
    task = Task(id="p", user_scenario={"instructions": "x"},
                evaluation_criteria={"actions": [{"action_id": "w", **update}], "reward_basis": ["ACTION"]})
    other = {**update, "arguments": {**update["arguments"], "parcel_key": "PCL-0003-1"}}
    assert score(env, task, [update], []).action == 1.0
    assert score(env, task, [other], []).action == 0.0


def test_compare_args_keeps_tau2s_identical_argument_rule(env):
    task = make_task(reward_basis=["ACTION"])
    for action in task.evaluation_criteria.actions:
        action.compare_args = list(action.arguments)  # tau2: compare these arguments
    reached_otherwise = [{"name": "get_customer_details", "arguments": {"customer_no": "C101"}},
                         {"name": "list_orders_by_buyer_customer_no", "arguments": {"customer_id": "C101"}},
                         {"name": "update_order_shipping_carrier", "arguments": {"order_code": "ORD-0003", "carrier": "ups"}}]
    assert score(env, task, reached_otherwise, []).unmatched_actions == ["a0", "a1", "a2"]
    assert score(env, task, calls_of(task), []).action == 1.0


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
