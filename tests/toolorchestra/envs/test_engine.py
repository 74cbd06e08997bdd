"""The generic engine: argument validation, every operation kind, state isolation and hashing."""

from __future__ import annotations

import copy
import json

import pytest
from helpers.third_party import third_party

from toolorchestra.envs.domain import Domain, load_domain
from toolorchestra.envs.engine import Engine, ReplayError, ToolCallError
from toolorchestra.envs.evaluation import Trajectory, evaluate, golden_state
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.envs.task import load_tasks


@pytest.fixture
def wh(unseen):
    domain = Domain("warehouse", unseen)
    engine = Engine(domain.tool_specs(), domain.layouts)
    return domain, engine, BaseDb(domain.db, domain.layouts)


def test_reads(wh):
    _, engine, base = wh
    state = DbState(base)
    assert engine.call(state, "get_order_details", {"order_code": "ORD-0003"})["buyer"] == {"customer_no": "C101"}
    assert engine.call(state, "find_customer_by_profile_contact_email", {"email": "USER5@shop.test"}) == ["C105"]
    assert engine.call(state, "search_customers_by_profile_full_name", {"query": "number1"})[:3] == ["C101", "C110", "C111"]
    assert engine.call(state, "list_orders_by_buyer_customer_no", {"customer_id": "C102"}) == ["ORD-0005", "ORD-0006"]
    assert engine.call(state, "list_orders_by_items_product_id", {"product_id": 2}) == ["ORD-0002", "ORD-0003"]
    assert engine.call(state, "get_product_details", {"id": 7})["label"] == "Widget model 7"


@pytest.mark.parametrize(
    ("name", "args", "pattern"),
    [
        ("get_order", {}, r"unknown tool; did you mean .*'get_order_details'"),
        ("get_order_details", {}, r"argument \(arguments\): 'order_code' is a required property"),
        ("get_order_details", {"order_code": 5}, "argument order_code: 5 is not of type 'string'"),
        ("get_order_details", {"order_code": "ORD-9999"}, "no orders record with id 'ORD-9999'"),
        ("update_order_state", {"order_code": "ORD-0001", "state": "lost"}, "argument state: 'lost' is not one of"),
        ("update_product_price", {"id": 1, "price": "cheap"}, "argument price: 'cheap' is not of type 'number'"),
        ("update_order_parcels_status", {"order_code": "ORD-0001", "parcel_key": "PCL-X", "status": "open"},
         "the record has no 'parcels.PCL-X'"),
        ("get_product_details", {"id": 1, "extra": 2}, "Additional properties are not allowed"),
        ("create_order", {"customer_no": "C999", "total": 1.0, "shipping_carrier": "dhl",
                          "shipping_address_city": "Town1"}, "no customers record with id 'C999'"),
    ],
)
def test_refused_calls(wh, name, args, pattern):
    _, engine, base = wh
    state = DbState(base)
    with pytest.raises(ToolCallError, match=pattern):
        engine.call(state, name, args)
    assert state.hash() == DbState(base).hash()  # a refused call changes nothing


def test_writes_copy_on_write(wh):
    domain, engine, base = wh
    before = json.dumps(domain.db, sort_keys=True)
    state = DbState(base)
    h0 = state.hash()
    engine.call(state, "update_order_parcels_status", {"order_code": "ORD-0001", "parcel_key": "PCL-0001-0", "status": "shipped"})
    assert state.get("orders", "ORD-0001")["parcels"]["PCL-0001-0"]["status"] == "shipped"
    new = engine.call(state, "create_order", {"customer_no": "C101", "total": 12.5, "shipping_carrier": "ups",
                                              "shipping_address_city": "Town2"})
    assert new["order_code"] == "ORD-0049" and new["buyer"] == {"customer_no": "C101"} and new["state"] == "open"
    assert state.get("customers", "C101")["orders"][-1] == "ORD-0049"
    engine.call(state, "set_order_state_cancelled", {"order_code": "ORD-0002"})
    with pytest.raises(ToolCallError, match="already 'cancelled'"):
        engine.call(state, "set_order_state_cancelled", {"order_code": "ORD-0002"})
    assert json.dumps(domain.db, sort_keys=True) == before  # the shared base never changes
    assert state.hash() != h0 and DbState(base).hash() == h0
    # the incremental hash equals the hash of the materialised database loaded afresh
    again = Domain("copy", copy.deepcopy(state.to_db()))
    assert DbState(BaseDb(again.db, again.layouts)).hash() == state.hash()
    assert [o["order_code"] for o in state.to_db()["orders"]][-1] == "ORD-0049"


def test_fork_and_delete(tmp_path):
    domain = load_domain(third_party("tau2-mock"))
    engine = Engine(domain.tool_specs(), domain.layouts)
    state = DbState(BaseDb(domain.db, domain.layouts))
    twin = state.fork()
    created = engine.call(state, "create_task", {"user_id": "user_1", "title": "T", "description": "D"})
    assert created["task_id"] == "task_2" and created["status"] == "pending"
    assert state.get("users", "user_1")["tasks"] == ["task_1", "task_2"] and not twin.exists("tasks", "task_2")
    assert engine.call(state, "delete_task", {"task_id": "task_1"}) == {"deleted": "task_1"}
    assert state.get("users", "user_1")["tasks"] == ["task_2"] and state.ids("tasks") == ["task_2"]
    assert twin.ids("tasks") == ["task_1"]


HANDWRITTEN_MOCK = [
    {"kind": "create", "name": "create_task", "description": "Create a task for a user.", "table": "tasks",
     "parameters": {"type": "object", "required": ["user_id", "title"], "additionalProperties": False,
                    "properties": {"user_id": {"type": "string"}, "title": {"type": "string"},
                                   "description": {"type": ["string", "null"]}}},
     "fields": {"title": ["title"], "description": ["description"]},
     "defaults": {"status": "pending", "description": None},
     "parent": {"table": "users", "param": "user_id", "list_path": ["tasks"]}},
    {"kind": "update", "name": "update_task_status", "description": "Set a task's status.", "table": "tasks",
     "id_param": "task_id", "path": ["status"], "value_param": "status",
     "parameters": {"type": "object", "required": ["task_id", "status"],
                    "properties": {"task_id": {"type": "string"}, "status": {"enum": ["pending", "completed"]}}}},
    {"kind": "transfer", "name": "transfer_to_human_agents", "description": "Transfer to a human.",
     "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}},
]


def test_handwritten_specs_replay_third_party_tasks(tmp_path):
    """tau2's own mock tasks replay on hand-written declarative specs loaded from tools.json."""
    src = third_party("tau2-mock")
    for name in ("db.json", "policy.md"):
        (tmp_path / name).write_text((src / name).read_text())
    (tmp_path / "tools.json").write_text(json.dumps(HANDWRITTEN_MOCK))
    domain = load_domain(tmp_path)
    engine = Engine(domain.tool_specs(), domain.layouts)
    base = BaseDb(domain.db, domain.layouts)
    replayed = 0
    for task in load_tasks(src / "tasks.json"):
        if task.id == "update_task_with_user_tools":  # needs tau2's user-side tools
            with pytest.raises(ReplayError, match="only assistant-side initialization actions"):
                golden_state(engine, base, task)
            continue
        state, _ = golden_state(engine, base, task)
        assert evaluate(task, Trajectory.golden(task), engine=engine, base=base).reward == 1.0
        replayed += 1
    assert replayed == 9
    # initial state by data, by actions and by message history all reach the same database
    tasks = {t.id: t for t in load_tasks(src / "tasks.json")}
    hashes = {golden_state(engine, base, tasks[i])[0].hash() for i in (
        "update_task_with_initialization_data", "update_task_with_initialization_actions",
        "update_task_with_message_history")}
    assert len(hashes) == 1
    with pytest.raises(ReplayError, match=r"golden action 0 \(update_task_status\) failed: argument status"):
        engine.replay(DbState(base), [{"name": "update_task_status", "arguments": {"task_id": "task_1", "status": "x"}}])
