"""Declarative tools of a live environment exposed as agent `Tool`s."""

from __future__ import annotations

import json

import pytest

from toolorchestra.envs.domain import Domain
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.evaluation import ToolCall, Trajectory
from toolorchestra.envs.task import Task
from toolorchestra.tools.base import Tool, ToolError


def test_env_tools_run_and_score(unseen):
    env = DomainEnv(Domain("warehouse", unseen))
    task = Task(id="t", user_scenario={"instructions": "cancel ORD-0001"}, evaluation_criteria={
        "actions": [{"action_id": "a", "name": "set_order_state_cancelled", "arguments": {"order_code": "ORD-0001"}}],
        "communicate_info": [], "reward_basis": ["DB", "ACTION"]})
    env.reset(task)
    tools = {t.name: t for t in env.tools()}
    assert all(isinstance(t, Tool) for t in tools.values())
    spec = tools["get_order_details"].spec()
    assert spec["function"]["parameters"]["required"] == ["order_code"]
    out = tools["get_order_details"].run({"order_code": "ORD-0001"})
    assert json.loads(out.content)["state"] == "open" and out.data["order_code"] == "ORD-0001"
    with pytest.raises(ToolError, match="get_order_details: no orders record"):
        tools["get_order_details"].run({"order_code": "X"})
    assert env.score(Trajectory()).reward == 0.0
    tools["set_order_state_cancelled"].run({"order_code": "ORD-0001"})
    traj = Trajectory(tool_calls=[ToolCall(name="set_order_state_cancelled", arguments={"order_code": "ORD-0001"})])
    assert env.score(traj).reward == 1.0
    env.reset(task)  # a new episode starts from the base again
    assert env.call("get_order_details", {"order_code": "ORD-0001"})["state"] == "open"
