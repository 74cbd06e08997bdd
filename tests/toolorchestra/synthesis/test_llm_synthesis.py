"""LLM synthesis driven by a scripted test double of an LLM: good outputs are accepted after
validation, bad ones are counted and never fatal."""

from __future__ import annotations

import json

from toolorchestra.envs.engine import Engine
from toolorchestra.envs.evaluation import Trajectory, evaluate, golden_state
from toolorchestra.envs.state import BaseDb
from toolorchestra.llm.base import LLM, Completion, LLMError
from toolorchestra.synthesis.llm_synthesis import LLMSynthesizer, extract_json


class ScriptedLLM(LLM):
    """Answers each stage (named in the system prompt) from a queue of canned texts."""

    model = "scripted"

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.prompts: list[str] = []

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None) -> Completion:
        stage = messages[0]["content"].split("]")[0].removeprefix("[stage: ")
        self.prompts.append(messages[-1]["content"])
        queue = self.script.get(stage) or ["I am not sure what you mean."]
        text = queue.pop(0) if len(queue) > 1 else queue[0]
        if text == "RAISE":
            raise LLMError("endpoint down")
        return Completion(text=text)


SCHEMA = {"tables": {
    "bikes": {"id_field": "bike_id", "fields": {"bike_id": "string", "model": "string", "status": "string",
                                                  "daily_rate": "number"},
              "enums": {"status": ["available", "rented", "repair"]}},
    "rentals": {"id_field": "rental_id", "fields": {"rental_id": "string", "bike_id": "string", "customer": "string"}},
}}
BIKES = [{"bike_id": f"B{i}", "model": f"Model {i}", "status": "available", "daily_rate": 10.0 + i / 2} for i in range(1, 5)]
RECORDS_BIKES = json.dumps([*BIKES, {"bike_id": "B9", "status": "stolen"}, BIKES[0]])
RECORDS_RENTALS = "Here you go:\n```json\n" + json.dumps(
    [{"rental_id": f"R{i}", "bike_id": f"B{i}", "customer": f"Cust {i}"} for i in range(1, 4)]) + "\n```"
GET = {"kind": "get", "name": "get_bike", "description": "Get a bike.", "table": "bikes", "id_param": "bike_id",
       "parameters": {"type": "object", "properties": {"bike_id": {"type": "string"}}, "required": ["bike_id"]}}
SET = {"kind": "update", "name": "set_bike_status", "description": "Set a bike's status.", "table": "bikes",
       "id_param": "bike_id", "path": ["status"], "value_param": "status",
       "parameters": {"type": "object", "required": ["bike_id", "status"],
                      "properties": {"bike_id": {"type": "string"}, "status": {"enum": ["available", "rented", "repair"]}}}}
GET_RENTAL = {**GET, "name": "get_rental", "table": "rentals", "id_param": "rental_id",
              "parameters": {"type": "object", "properties": {"rental_id": {"type": "string"}}}}
TOOLS = json.dumps([GET, SET, GET_RENTAL, {"kind": "exec", "name": "x", "code": "rm -rf /"},
                    {**GET, "name": "get_bad", "id_param": "undeclared"}, {**GET, "name": "get_ghost", "table": "ghosts"}])


def task(actions, info, **extra):
    return json.dumps({"reason_for_call": "My bike B2 is broken.", "known_info": "Bike B2.", "unknown_info": None,
                       "task_instructions": "Ask the agent to put bike B2 in repair and tell you its daily rate.",
                       "actions": actions, "communicate_info": info, **extra})


GOOD = [{"name": "get_bike", "arguments": {"bike_id": "B2"}},
        {"name": "set_bike_status", "arguments": {"bike_id": "B2", "status": "repair"}}]
SCRIPT = {
    "schema": ["Sure! " + json.dumps(SCHEMA)],
    "records": [RECORDS_BIKES, RECORDS_RENTALS],
    "tools": [TOOLS],
    "tasks": [
        task(GOOD, ["11"]),
        task([{"name": "teleport_bike", "arguments": {}}], []),
        "I would ask the agent nicely.",
        task(GOOD, ["99.99"]),
        task([{"name": "set_bike_status", "arguments": {"bike_id": "B2", "status": "exploded"}}], []),
    ],
    "evolve": [task([*GOOD, {"name": "get_rental", "arguments": {"rental_id": "R2"}}], ["11", "Cust 2"])],
}


def test_good_and_bad_outputs_are_validated_and_counted():
    llm = ScriptedLLM(SCRIPT)
    result = LLMSynthesizer(llm, tasks=5, evolve=1).synthesize("a bike rental shop", name="bikes")
    stats = result.stats
    assert result.domain is not None and set(result.domain.db) == {"bikes", "rentals"}
    assert sorted(result.domain.db["bikes"]) == ["B1", "B2", "B3", "B4"]
    assert [s.name for s in result.specs] == ["get_bike", "set_bike_status", "get_rental"]
    assert [t.id for t in result.tasks] == ["bikes-llm-0000", "bikes-llm-0000-e1"]
    assert stats.failures == {
        "records:invalid_record": 1, "records:duplicate_id": 1, "tools:invalid_spec": 3,
        "tasks:replay_error": 2, "tasks:not_json": 1, "tasks:communicate_not_in_reads": 1,
    }
    assert stats.accepted == {"schema": 1, "records": 7, "tools": 3, "tasks": 1, "evolve": 1}
    assert stats.calls == 1 + 2 + 1 + 5 + 1
    engine = Engine(result.specs, result.domain.layouts)
    base = BaseDb(result.domain.db, result.domain.layouts)
    for t in result.tasks:
        golden_state(engine, base, t)
        assert evaluate(t, Trajectory.golden(t), engine=engine, base=base).reward == 1.0
    assert "a bike rental shop" in llm.prompts[0]


def test_a_useless_model_runs_to_the_end():
    result = LLMSynthesizer(ScriptedLLM({})).synthesize("a bakery", name="bakery")
    assert result.domain is None and result.tasks == []
    assert result.stats.failures == {"schema:not_json": 1}
    down = LLMSynthesizer(ScriptedLLM({"schema": ["RAISE"]})).synthesize("a bakery", name="bakery")
    assert down.stats.failures == {"schema:llm_error": 1}
    bad_schema = LLMSynthesizer(ScriptedLLM({"schema": ['{"tables": {"Bad Name": {"id_field": "x", "fields": {"x": "string"}}}}']}))
    assert bad_schema.synthesize("a bakery", name="b").stats.failures == {"schema:invalid:tables": 1}


def test_invalid_tools_fall_back_to_derived_specs():
    script = {**SCRIPT, "tools": ['[{"kind": "get"}]'], "tasks": ["nothing"], "evolve": ["nothing"]}
    result = LLMSynthesizer(ScriptedLLM(script), tasks=1).synthesize("a bike rental shop", name="bikes")
    assert result.stats.failures["tools:fallback_derived"] == 1
    assert {s.kind for s in result.specs} >= {"get", "update"} and result.tasks == []


def test_extract_json():
    assert extract_json('text {"a": [1, {"b": 2}]} more') == {"a": [1, {"b": 2}]}
    assert extract_json("```json\n[1, 2]\n```") == [1, 2]
    assert extract_json("bad { not json } then [3]") == [3]
