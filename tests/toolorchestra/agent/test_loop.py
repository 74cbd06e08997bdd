"""The orchestrator loop driven by a scripted policy through every failure path."""

from __future__ import annotations

import json
import time

import pytest

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.llm.base import LLM, Completion, LLMError, ToolCallRequest, Usage
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.tools.base import Tool, ToolError, ToolOutput
from toolorchestra.tools.catalog import Price
from toolorchestra.tools.experts import ExpertTool
from toolorchestra.tools.toolbox import Toolbox


class ScriptedLLM(LLM):
    """Plays back fixed replies (text, or an exception to raise), recording what it was shown."""

    def __init__(self, replies, model="scripted"):
        self.replies, self.model, self.seen = list(replies), model, []

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        self.seen.append([dict(m) for m in messages])
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, Completion):
            return reply
        return Completion(text=reply, usage=Usage(prompt_tokens=100, completion_tokens=10), latency_s=0.01, model=self.model)


class Add(Tool):
    name, description = "add", "add two integers"
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                  "required": ["a", "b"], "additionalProperties": False}

    def run(self, arguments):
        return ToolOutput(content=str(arguments["a"] + arguments["b"]))


class Broken(Tool):
    name, description = "broken", "always fails"
    parameters = {"type": "object", "properties": {}}

    def __init__(self, exc):
        self.exc = exc

    def run(self, arguments):
        raise self.exc


class Slow(Tool):
    name, description = "slow", "takes a while"
    parameters = {"type": "object", "properties": {}}

    def run(self, arguments):
        time.sleep(0.05)
        return ToolOutput(content="done")


def call(name, **arguments):
    return format_tool_call(name, arguments)


def run(replies, tools=None, **kw):
    toolbox = Toolbox(tools or [Add()], prices={"add": Price(per_call=0.01)})
    policy = ScriptedLLM(replies)
    orch = Orchestrator(policy, toolbox, policy_price=Price(input_per_mtok=1.0, output_per_mtok=2.0), **kw)
    return orch.run("What is 2 + 3?", "I care about cost."), policy


def test_happy_path_records_call_observation_cost_and_answer():
    traj, policy = run([call("add", a=2, b=3), "5"])
    assert traj.answer == "5" and traj.stop_reason == "final_message"
    first, last = traj.turns
    assert (first.tool, first.arguments, first.observation, first.ok) == ("add", {"a": 2, "b": 3}, "5", True)
    policy_cost = (100 * 1.0 + 10 * 2.0) / 1e6
    assert first.cost_usd == pytest.approx(policy_cost + 0.01)
    assert last.tool is None and last.observation is None and last.cost_usd == pytest.approx(policy_cost)
    assert traj.cost_usd == pytest.approx(2 * policy_cost + 0.01)
    assert traj.tool_calls == {"add": 1} and traj.format_valid
    assert traj.metrics() == {"calls/add": 1.0, "cost": traj.cost_usd, "latency": traj.latency_s}
    # the preference is appended to the task; the second turn saw the observation
    assert policy.seen[0][1]["content"] == "What is 2 + 3?\n\nUser preference: I care about cost."
    assert policy.seen[1][-1] == {"role": "tool", "content": "5"}


def test_a_later_turn_bills_the_previous_turns_prompt_at_the_cached_price_whatever_the_engine_reports():
    replies = [Completion(text=call("add", a=2, b=3), usage=Usage(prompt_tokens=600, completion_tokens=20)),
               # the engine found 630 in its cache (other episodes left some): not what is billed
               Completion(text="5", usage=Usage(prompt_tokens=640, completion_tokens=5, cached_prompt_tokens=630))]
    toolbox = Toolbox([Add()], prices={"add": Price(per_call=0.01)})
    price = Price(input_per_mtok=1.0, cached_input_per_mtok=0.1, output_per_mtok=2.0)
    traj = Orchestrator(ScriptedLLM(replies), toolbox, policy_price=price).run("What is 2 + 3?")
    first, second = traj.turns
    assert first.cost_usd == pytest.approx((600 * 1.0 + 20 * 2.0) / 1e6 + 0.01)  # a first turn reuses nothing
    assert second.cost_usd == pytest.approx((600 * 0.1 + 40 * 1.0 + 5 * 2.0) / 1e6)


@pytest.mark.parametrize(
    ("reply", "error", "needle"),
    [
        ("<tool_call>{not json}</tool_call>", "malformed_call", "malformed tool call"),
        ('<tool_call>{"arguments": {}}</tool_call>', "malformed_call", 'missing "name"'),
        (call("multiply", a=1, b=2), "unknown_tool", "Available tools: add"),
        (call("add", a="two", b=3), "invalid_arguments", "a: 'two' is not of type 'integer'"),
        (call("add", a=1), "invalid_arguments", "'b' is a required property"),
        (call("add", a=1, b=2, c=3), "invalid_arguments", "Additional properties"),
    ],
)
def test_model_errors_become_observations_and_the_model_can_recover(reply, error, needle):
    traj, policy = run([reply, call("add", a=2, b=3), "5"])
    bad = traj.turns[0]
    assert bad.ok is False and bad.error == error and needle in bad.observation
    assert traj.answer == "5" and traj.turns[1].ok
    assert policy.seen[1][-1]["content"] == bad.observation  # the model saw the error
    assert traj.format_valid is (error != "malformed_call")


@pytest.mark.parametrize(
    ("exc", "error"),
    [
        (ToolError("wall time of 10 s exceeded"), "tool_error"),
        (LLMError("expert endpoint timed out after 4 attempts"), "llm_error"),
        (ZeroDivisionError("division by zero"), "crash"),
    ],
)
def test_tool_failures_and_timeouts_become_observations(exc, error):
    traj, _ = run([call("broken"), "gave up"], tools=[Add(), Broken(exc)])
    turn = traj.turns[0]
    assert turn.error == error and str(exc) in turn.observation and not turn.ok
    assert traj.answer == "gave up"


class Lookup(Tool):
    """A deterministic tool that fails for an unknown id, counting its runs."""

    name, description, deterministic = "lookup", "a record by id", True
    parameters = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}

    def __init__(self):
        self.runs = 0

    def run(self, arguments):
        self.runs += 1
        if arguments["id"] != "R1":
            raise ToolError(f"no record with id {arguments['id']!r}")
        return ToolOutput(content="R1: 42")


def test_a_repeat_of_the_call_that_just_failed_is_not_run_when_it_would_fail_again():
    """The 2026-12-07 demo's policy sent the same failing call three times in a row. A repeat of a
    deterministic tool's failed call, or of one the toolbox rejected unrun, is answered without
    running it; a changed call, or a repeat of a call that may come out differently, runs."""
    lookup = Lookup()
    traj, policy = run([call("lookup", id="X"), call("lookup", id="X"), call("lookup", id="R1"), "42"],
                       tools=[lookup])
    first, repeat, changed, _ = traj.turns
    assert lookup.runs == 2 and traj.answer == "42"  # X once, then R1
    assert (repeat.ok, repeat.error, repeat.tool, repeat.tool_cost_usd) == (False, "repeated_call", "lookup", 0.0)
    assert "not run" in repeat.observation and policy.seen[2][-1]["content"] == repeat.observation
    assert changed.ok and changed.observation == "R1: 42"
    # rejected unrun by the schema: the same arguments are rejected again
    traj, _ = run([call("add", a=1), call("add", a=1), "3"])
    assert [t.error for t in traj.turns[:2]] == ["invalid_arguments", "repeated_call"]
    # a tool that is not deterministic (a model, a remote service) is run again
    flaky = Broken(ToolError("timed out"))
    traj, _ = run([call("broken"), call("broken"), "gave up"], tools=[flaky])
    assert [t.error for t in traj.turns[:2]] == ["tool_error", "tool_error"]
    # a repeat after a success runs (the answer may be read again)
    traj, _ = run([call("add", a=2, b=3), call("add", a=2, b=3), "5"])
    assert [t.ok for t in traj.turns[:2]] == [True, True]


@pytest.mark.parametrize(
    ("reply", "echo"),
    [
        ("Error: broken: wall time of 10 s exceeded", True),  # the error observation itself
        ("wall time of 10 s exceeded", False),                 # part of it, in the policy's own reply
        ("gave up", False),
    ],
)
def test_a_reply_repeating_a_failed_calls_error_is_no_answer(reply, echo):
    traj, _ = run([call("broken"), reply], tools=[Add(), Broken(ToolError("wall time of 10 s exceeded"))])
    assert traj.turns[0].observation == "Error: broken: wall time of 10 s exceeded"
    assert traj.stop_reason == "final_message"
    if echo:
        assert traj.answer is None and "repeats the failed broken call's error" in traj.error
    else:  # kept, flagged: the user sees that no result backs it
        assert traj.answer == reply and "follows a failed broken call" in traj.error


def test_a_reply_after_a_successful_call_may_repeat_its_result():
    traj, _ = run([call("add", a=2, b=3), "5"])
    assert traj.answer == "5" and traj.error is None


def test_policy_endpoint_failure_ends_the_episode_without_raising():
    traj, _ = run([call("add", a=1, b=1), LLMError("policy endpoint down")])
    assert traj.stop_reason == "policy_error" and "policy endpoint down" in traj.error
    assert traj.answer is None and len(traj.turns) == 1 and not traj.format_valid


def test_max_turns_stops_a_model_that_never_answers():
    traj, _ = run([call("add", a=1, b=1)] * 3, max_turns=3)
    assert traj.stop_reason == "max_turns" and traj.answer is None and len(traj.turns) == 3


def test_answer_tool_ends_the_episode_and_expert_tokens_are_priced():
    expert = ScriptedLLM(["5"], model="expert")
    answer = ExpertTool("answer", "final answer", "answer", {"big": expert, "small": ScriptedLLM([])})
    toolbox = Toolbox([Add(), answer], model_prices={"big": Price(input_per_mtok=10.0, output_per_mtok=30.0)})
    traj = Orchestrator(ScriptedLLM([call("add", a=2, b=3), call("answer", model="big")]), toolbox).run("2+3?")
    assert traj.stop_reason == "answer_tool" and traj.answer == "5"
    last = traj.turns[-1]
    assert last.tool_usage["big"].prompt_tokens == 100
    assert last.tool_cost_usd == pytest.approx((100 * 10 + 10 * 30) / 1e6)
    assert traj.tokens["big"].completion_tokens == 10
    # the expert saw the task and the evidence gathered so far
    assert "2+3?" in expert.seen[0][1]["content"] and "[add] 5" in expert.seen[0][1]["content"]


def test_a_program_printing_one_value_ends_the_episode_without_another_policy_turn():
    from toolorchestra.tools.code_interpreter import CodeInterpreter

    toolbox = Toolbox([CodeInterpreter(final_answer_line=True)])
    policy = ScriptedLLM([call("code_interpreter", code="print(17 * 23)")])
    traj = Orchestrator(policy, toolbox).run("What is 17 * 23?")
    assert (traj.answer, traj.stop_reason, len(traj.turns), len(policy.seen)) == ("391", "answer_tool", 1, 1)
    # output to read on (a record) comes back as an observation, and the policy answers from it
    policy = ScriptedLLM([call("code_interpreter", code="print({'name': 'Lima'})"), "Lima"])
    traj = Orchestrator(policy, toolbox).run("Which city?")
    assert (traj.answer, traj.stop_reason, len(traj.turns)) == ("Lima", "final_message", 2)


def test_unknown_expert_alias_is_rejected_by_the_schema():
    answer = ExpertTool("answer", "d", "answer", {"big": ScriptedLLM([]), "small": ScriptedLLM([])})
    traj = Orchestrator(ScriptedLLM([call("answer", model="huge"), "x"]), Toolbox([answer])).run("q")
    assert traj.turns[0].error == "invalid_arguments"
    assert "'huge' is not one of ['big', 'small']" in traj.turns[0].observation


def test_structured_tool_calls_from_a_server_keep_their_ids():
    structured = Completion(text="", tool_calls=[ToolCallRequest(name="add", arguments='{"a": 1, "b": 2}', id="c7")])
    traj, policy = run([structured, "3"])
    assert traj.turns[0].observation == "3"
    assert policy.seen[1][-2]["tool_calls"][0]["id"] == "c7"
    assert policy.seen[1][-1] == {"role": "tool", "content": "3", "tool_call_id": "c7"}


def test_trajectory_json_round_trip_is_lossless():
    traj, _ = run(["<tool_call>{bad</tool_call>", call("add", a=2, b=3), "5"])
    again = Trajectory.from_json(traj.to_json())
    assert again == traj
    summary = json.loads(json.dumps(again.summary()))
    assert {"answer", "turns", "cost_usd", "latency_s", "tokens"} <= set(summary)
    assert all({"tool", "arguments", "observation", "cost_usd", "latency_s"} <= set(t) for t in summary["turns"])


def test_batch_runs_episodes_in_lockstep_with_concurrent_tools():
    class Batched(ScriptedLLM):
        calls = 0

        def chat_batch(self, batch, **kw):
            Batched.calls += 1
            return [self.chat(m, **kw) for m in batch]

    policy = Batched([call("slow"), call("slow"), call("slow"), "a", "b", "c"])
    orch = Orchestrator(policy, Toolbox([Slow()]))
    started = time.perf_counter()
    trajs = orch.run_batch([("t1", None), ("t2", None), ("t3", "cheap")])
    assert [t.answer for t in trajs] == ["a", "b", "c"]
    assert Batched.calls == 2  # one generation per turn for all episodes
    assert time.perf_counter() - started < 0.14  # three 50 ms tool calls ran concurrently


def test_episodes_with_their_own_toolboxes_and_prompts_batch_together():
    class Recording(ScriptedLLM):
        def chat_batch(self, batch, *, tools=None, tools_per_row=None, **kw):
            self.last_tools = (tools, tools_per_row)
            return [self.chat(m, **kw) for m in batch]

    class Mul(Add):
        name = "mul"

        def run(self, arguments):
            return ToolOutput(content=str(arguments["a"] * arguments["b"]))

    policy = Recording([call("add", a=2, b=3), call("mul", a=2, b=3), "5", "6"])
    orch = Orchestrator(policy, Toolbox([]))
    custom = [{"role": "system", "content": "custom system"}, {"role": "user", "content": "use mul"}]
    episodes = [orch.start("t1", toolbox=Toolbox([Add()])),
                orch.start("t2", toolbox=Toolbox([Mul()], max_observation_chars=1000), messages=custom)]
    trajs = orch.run_episodes(episodes)
    assert [t.turns[0].observation for t in trajs] == ["5", "6"]
    assert trajs[1].messages[0]["content"] == "custom system"
    tools, per_row = policy.last_tools
    assert tools is None and [s[0]["function"]["name"] for s in per_row] == ["add", "mul"]


def test_local_backend_renders_each_rows_tools(tiny_llm):
    specs = [Add().spec()], [Slow().spec()]
    out = tiny_llm.chat_batch([[{"role": "user", "content": "x"}]] * 2, tools_per_row=list(specs), max_tokens=2)
    assert len(out) == 2
    assert '\n- add(' in tiny_llm.render([{"role": "user", "content": "x"}], specs[0])
    with pytest.raises(ValueError, match="one entry per chat"):
        tiny_llm.chat_batch([[{"role": "user", "content": "x"}]], tools_per_row=[], max_tokens=2)


# -- limits: a cost budget and per-episode turn limits -----------------------------------------

PRICE = Price(input_per_mtok=1.0, output_per_mtok=2.0)


def bound_of_turn(policy, messages, tools, max_tokens):
    """What the loop assumes the next policy turn may cost: counted prompt + max_tokens output."""
    return (policy.count_prompt_tokens(messages, tools) * 1.0 + max_tokens * 2.0) / 1e6


def test_budget_ends_before_a_policy_turn_that_could_exceed_it_with_the_best_answer_so_far():
    toolbox = Toolbox([Add()], prices={"add": Price(per_call=0.001)})
    policy = ScriptedLLM([call("add", a=2, b=3), "5"])
    orch = Orchestrator(policy, toolbox, policy_price=PRICE, max_tokens=64)
    first = orch.start("What is 2 + 3?")
    needed_first = bound_of_turn(policy, first.messages, first.specs, 64)
    spent_first = (100 * 1.0 + 10 * 2.0) / 1e6 + 0.001
    # enough for the first turn and its call, not for the second turn's bound
    budget = max(needed_first, spent_first) + 1e-6
    traj = orch.run_episodes([orch.start("What is 2 + 3?", budget_usd=budget)])[0]
    assert traj.stop_reason == "budget" and len(traj.turns) == 1 and len(policy.seen) == 1
    assert traj.cost_usd <= budget and traj.budget_usd == budget
    assert traj.answer == "5"  # the last successful observation
    assert "next policy turn" in traj.error and f"${budget:.6f}" in traj.error


def test_budget_skips_a_tool_call_that_could_exceed_it():
    class Counting(Add):
        runs = 0

        def run(self, arguments):
            Counting.runs += 1
            return super().run(arguments)

    toolbox = Toolbox([Counting()], prices={"add": Price(per_call=0.01)})
    policy = ScriptedLLM([call("add", a=2, b=3), "5"])
    orch = Orchestrator(policy, toolbox, policy_price=PRICE, max_tokens=64)
    traj = orch.run_episodes([orch.start("What is 2 + 3?", budget_usd=0.005)])[0]
    assert Counting.runs == 0 and traj.stop_reason == "budget" and traj.cost_usd <= 0.005
    assert traj.turns[0].tool == "add" and traj.turns[0].error == "budget" and traj.answer is None
    assert "next add call" in traj.error


def test_zero_budget_makes_no_call_and_unlimited_episodes_are_unaffected():
    policy = ScriptedLLM([call("add", a=2, b=3), "5"])
    orch = Orchestrator(policy, Toolbox([Add()]), policy_price=PRICE)
    broke, free = orch.run_episodes([orch.start("t1", budget_usd=0.0), orch.start("t2")])
    assert broke.stop_reason == "budget" and broke.turns == [] and broke.cost_usd == 0.0
    assert free.stop_reason == "final_message" and free.answer == "5" and free.budget_usd is None


def test_expert_cost_bound_counts_its_prompt_and_max_tokens():
    expert = ExpertTool("ask_expert", "ask", "ask", {"big": ScriptedLLM(["x"])}, max_tokens=100)
    toolbox = Toolbox([expert], prices={"ask_expert": Price(per_call=0.5)},
                      model_prices={"big": Price(input_per_mtok=10.0, output_per_mtok=1000.0)})
    bound = toolbox.cost_bound("ask_expert", {"model": "big", "question": "why?"})
    assert bound > 0.5 + 100 * 1000.0 / 1e6  # per-call price + its whole output allowance + some prompt


def test_episodes_keep_their_own_turn_limits_and_observers_see_turns_then_the_end():
    policy = ScriptedLLM([call("add", a=1, b=1), call("add", a=1, b=1), call("add", a=1, b=1)])
    orch = Orchestrator(policy, Toolbox([Add()]), max_turns=8)
    seen = []
    short, longer = orch.start("t1", max_turns=1), orch.start("t2", max_turns=2)
    for name, episode in (("short", short), ("longer", longer)):
        episode.on_turn = lambda turn, name=name: seen.append((name, "turn", turn.index))
        episode.on_done = lambda traj, name=name: seen.append((name, "done", traj.stop_reason))
    trajs = orch.run_episodes([short, longer])
    assert [len(t.turns) for t in trajs] == [1, 2] and {t.stop_reason for t in trajs} == {"max_turns"}
    assert seen == [("short", "turn", 0), ("longer", "turn", 0), ("short", "done", "max_turns"),
                    ("longer", "turn", 1), ("longer", "done", "max_turns")]
