"""Hostile model output: deep nesting and huge calls are malformed calls, never a crash
(Hermes text, server-parsed structured calls, and the agent loop around both)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.llm.base import LLM, Completion, ToolCallRequest, Usage
from toolorchestra.llm.hermes import (
    MAX_CALL_CHARS,
    MAX_DEPTH,
    MalformedToolCall,
    ParsedCall,
    parse_arguments,
    parse_tool_call,
)
from toolorchestra.tools.base import Tool, ToolOutput
from toolorchestra.tools.toolbox import Toolbox

NESTED_1000 = '<tool_call>{"name":"x","arguments":{"a":' + "[" * 1000 + "]" * 1000 + "}}</tool_call>"


@pytest.mark.parametrize("text", [
    NESTED_1000,
    '<tool_call>{"name":"x","arguments":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}</tool_call>",
    '<tool_call>{"name":"x","arguments":' + '{"a":' * 5000 + "1" + "}" * 5000 + "}</tool_call>",
    '<tool_call>{"name":"x","arguments":{"a":' + "[" * 5000,  # unterminated
])
def test_deep_nesting_in_hermes_text_is_a_malformed_call(text):
    with pytest.raises(MalformedToolCall, match=f"at most {MAX_DEPTH}|at most {MAX_CALL_CHARS}"):
        parse_tool_call(text)


def test_huge_call_is_refused_by_size():
    text = '<tool_call>{"name":"x","arguments":{"a":"' + "y" * (MAX_CALL_CHARS + 1) + '"}}</tool_call>'
    with pytest.raises(MalformedToolCall, match=f"at most {MAX_CALL_CHARS} are accepted"):
        parse_tool_call(text)


def test_brackets_inside_strings_do_not_count_and_the_limit_is_exact():
    assert parse_tool_call('<tool_call>{"name":"x","arguments":{"a":"' + "[" * 5000 + '"}}</tool_call>')
    inner = MAX_DEPTH - 2  # the call object and the arguments object are two levels
    ok = '<tool_call>{"name":"x","arguments":{"a":' + "[" * inner + "]" * inner + "}}</tool_call>"
    assert parse_tool_call(ok).name == "x"
    over = ok.replace("[", "[[", 1).replace("]", "]]", 1)
    with pytest.raises(MalformedToolCall):
        parse_tool_call(over)


def test_server_parsed_arguments_are_bounded_too():
    with pytest.raises(MalformedToolCall, match="at most"):
        parse_arguments('{"a":' + "[" * 1000 + "]" * 1000 + "}")
    deep: object = 1
    for _ in range(2000):
        deep = [deep]
    with pytest.raises(MalformedToolCall, match="nest more than"):
        parse_arguments({"a": deep})


class Echo(Tool):
    name, description = "x", "echo"
    parameters = {"type": "object"}

    def run(self, arguments):
        return ToolOutput(content=json.dumps(arguments))


class Replay(LLM):
    model = "replay"

    def __init__(self, completions):
        self.completions = list(completions)

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        return self.completions.pop(0)


def completion(text="", calls=()):
    return Completion(text=text, tool_calls=list(calls), usage=Usage(), latency_s=0.0, model="replay")


@pytest.mark.parametrize("first", [
    completion(NESTED_1000),
    completion(calls=[ToolCallRequest(name="x", arguments='{"a":' + "[" * 1000 + "]" * 1000 + "}", id="c1")]),
])
def test_the_agent_loop_turns_deep_calls_into_error_observations(first):
    orchestrator = Orchestrator(Replay([first, completion("done")]), Toolbox([Echo()]), max_turns=3)
    trajectory = orchestrator.run("task")
    assert trajectory.turns[0].error == "malformed_call" and "at most" in trajectory.turns[0].observation
    assert trajectory.answer == "done"
    json.dumps(trajectory.model_dump(mode="json"))  # the recorded trajectory serialises


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=40,
)
junk = st.text(alphabet='[]{}",:\\ ax0<>/_tolcn', max_size=300)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(junk, json_values.map(json.dumps)), st.integers(0, 1500))
def test_fuzz_never_crashes(body, extra_depth):
    text = "<tool_call>" + "[" * extra_depth + body + "]" * extra_depth + "</tool_call>"
    try:
        result = parse_tool_call(text)
    except MalformedToolCall:
        return
    assert isinstance(result, ParsedCall)
    json.dumps(result.arguments)


@settings(max_examples=200, deadline=None)
@given(st.one_of(junk, json_values.map(json.dumps)))
def test_fuzz_arguments_never_crash(raw):
    try:
        assert isinstance(parse_arguments(raw), dict)
    except MalformedToolCall:
        pass
