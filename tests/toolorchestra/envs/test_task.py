"""The tau2 Task model: third-party tasks round-trip unchanged; bad tasks fail with a JSON path."""

from __future__ import annotations

import json

import pytest
from helpers.third_party import third_party

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.task import (
    StructuredUserInstructions,
    Task,
    dump_task,
    dump_tasks,
    load_tasks,
    parse_task,
    parse_tasks,
    save_tasks,
)


def test_tau2_mock_tasks_round_trip_unchanged(tmp_path):
    path = third_party("tau2-mock", "tasks.json")
    raw = json.loads(path.read_text())
    tasks = load_tasks(path)
    assert len(tasks) == 10
    assert dump_tasks(tasks) == raw
    # unknown fields (tau2's `ticket`, `info`, `turn_idx`) survive, and so does a save/load cycle
    assert tasks[0].ticket and tasks[0].actions[0].model_extra == {} and tasks[0].actions[0].info
    save_tasks(tmp_path / "t.json", tasks)
    assert json.loads((tmp_path / "t.json").read_text()) == raw


def test_unknown_fields_and_nulls_are_kept():
    raw = {
        "id": "t1",
        "user_scenario": {"instructions": "do it", "extra_field": [1, {"a": None}]},
        "custom": {"x": 1},
        "evaluation_criteria": {"actions": [{"action_id": "a", "name": "f", "arguments": {"k": None},
                                             "compare_args": [], "weird": True}],
                                "communicate_info": []},
        "initial_state": None,
    }
    task = parse_task(raw)
    assert dump_task(task) == raw
    assert task.actions[0].compare_args == []
    assert task.reward_basis == ["DB", "COMMUNICATE"]  # tau2's default when absent


def test_structured_instructions_render():
    task = Task(id="x", user_scenario={"instructions": {
        "domain": "bank", "reason_for_call": "lost card", "known_info": "id 7", "task_instructions": "block it"}})
    assert isinstance(task.user_scenario.instructions, StructuredUserInstructions)
    text = task.user_scenario.instructions_text()
    assert "lost card" in text and "block it" in text and "Unknown info" not in text


def test_invalid_task_names_index_and_path(tmp_path):
    with pytest.raises(ConfigError, match=r"tasks.json: \$\[1\]\.user_scenario: invalid task: Field required"):
        path = tmp_path / "tasks.json"
        path.write_text(json.dumps([{"id": "a", "user_scenario": {"instructions": "x"}}, {"id": "b"}]))
        load_tasks(path)
    with pytest.raises(ConfigError, match=r"\$\[0\]\.evaluation_criteria\.reward_basis\[0\]"):
        parse_tasks([{"id": "a", "user_scenario": {"instructions": "x"},
                      "evaluation_criteria": {"reward_basis": ["MONEY"]}}])
    with pytest.raises(ConfigError, match="expected a JSON list"):
        parse_tasks({"id": "a"})
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    with pytest.raises(ConfigError, match="bad.json: not JSON: .* line 1"):
        load_tasks(bad)
