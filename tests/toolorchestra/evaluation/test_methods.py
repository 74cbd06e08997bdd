"""Baselines: the random router's routing, the fixed routes (always strongest, cascade), expert
methods, batching by tool list, labels."""

from __future__ import annotations

import pytest
from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.evaluation.methods import (
    MethodsConfig,
    RandomRouterPolicy,
    always_strongest,
    build_methods,
    cascade,
    expert_choices,
    expert_methods,
    mark_extremes,
)
from toolorchestra.evaluation.metrics import Metrics
from toolorchestra.llm.hermes import parse_tool_call
from toolorchestra.tools.catalog import load_embedded_catalog


def specs_of(catalog, names):
    from toolorchestra.tools.toolbox import build_toolbox

    box = build_toolbox(catalog.subset(names), None, llm_for=lambda alias: ScriptedLLM())  # type: ignore[arg-type]
    return box.specs()


def paper_style():
    """The embedded models with multi-model `answer` and `enhance_reasoning` tools (a `model` argument)."""
    from toolorchestra.tools.catalog import parse_catalog

    data = load_embedded_catalog().to_dict()
    both = ["smollm2", "smollm2-vote5"]
    data["tools"] = [t for t in data["tools"] if t["name"] == "code_interpreter"] + [
        {"name": "answer", "kind": "llm", "backend": {"type": "expert", "role": "answer", "models": both}},
        {"name": "enhance_reasoning", "kind": "llm", "backend": {"type": "expert", "role": "reason", "models": both}}]
    return parse_catalog(data, source="paper-style")


def test_random_router_routes_to_llm_tools_and_answers_last():
    catalog = paper_style()
    specs = specs_of(catalog, ["answer", "enhance_reasoning", "code_interpreter"])
    router = RandomRouterPolicy(catalog, seed=0, max_turns=3)
    task = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 6*7?"}]
    seen = set()
    for turn in range(2):
        messages = task + [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * turn
        call = parse_tool_call(router.chat(messages, tools=specs).text)
        assert call.name in {"answer", "enhance_reasoning"} and call.arguments["model"] in {"smollm2", "smollm2-vote5"}
        assert router.chat(messages, tools=specs).text == router.chat(messages, tools=specs).text  # seeded
        seen.add(call.name)
    last = task + [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * 2
    assert parse_tool_call(router.chat(last, tools=specs).text).name == "answer"
    plain = router.chat(task, tools=specs_of(catalog, ["code_interpreter"]))
    assert parse_tool_call(plain.text) is None and plain.usage.total_tokens == 0
    rows = router.chat_batch([task, task], tools_per_row=[specs, specs_of(catalog, ["code_interpreter"])])
    assert parse_tool_call(rows[0].text).name in {"answer", "enhance_reasoning"}
    assert parse_tool_call(rows[1].text) is None


def test_random_router_calls_single_model_experts_without_a_model_argument():
    catalog = load_embedded_catalog().subset(["ask_direct", "ask_program", "ask_vote", "code_interpreter"])
    specs = specs_of(catalog, [t.name for t in catalog.tools])
    router = RandomRouterPolicy(catalog, seed=0, max_turns=2)
    task = [{"role": "user", "content": f"What is {n} * 7?"} for n in range(12)]
    calls = [parse_tool_call(router.chat([t], tools=specs).text) for t in task]
    assert {c.name for c in calls} == {"ask_direct", "ask_program", "ask_vote"}  # random over the experts
    assert all(c.arguments == {} for c in calls)
    # on the last turn every expert can end the task, so any of them may be chosen
    last = [task[0], {"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}]
    assert parse_tool_call(router.chat(last, tools=specs).text).name in {"ask_direct", "ask_program", "ask_vote"}


def test_expert_methods_get_only_basic_tools():
    catalog = load_embedded_catalog()
    # smollm2-vote5 is the same backend as smollm2: one monolithic expert, not two identical ones
    (method,) = expert_methods(catalog, lambda alias: ScriptedLLM(model=alias))
    assert method.name == "expert:smollm2" and method.policy_alias == "smollm2"
    assert set(method.offered(catalog)) == {"code_interpreter", "local_search", "web_search"}


def test_strongest_and_cheapest_experts_are_labelled():
    from toolorchestra.evaluation.methods import Method

    def metrics(acc, cost):
        return {"overall": Metrics(n=10, accuracy=acc, cost_mean=cost, cost_total=cost * 10, latency_mean=1,
                                   format_valid_rate=1, answered_rate=1)}

    methods = [Method(name=n, role="expert", policy=ScriptedLLM(), policy_alias=None) for n in ("big", "small", "mid")]
    summary = {"big": metrics(0.8, 0.1), "small": metrics(0.3, 0.001), "mid": metrics(0.5, 0.01)}
    assert mark_extremes(summary, methods) == {"big": ["strongest"], "small": ["cheapest"], "mid": []}


def _measured(catalog, accuracy):
    """`catalog` with describe-stage stats: `accuracy[tool]` = (correct, n) on qa_numeric."""
    tools = []
    for t in catalog.tools:
        if t.name in accuracy:
            correct, n = accuracy[t.name]
            stats = {"models": {t.backend.models[0]: {
                "qa_numeric": {"n": n, "correct": correct, "accuracy": correct / n, "metric": "accuracy",
                               "mean_cost_usd": 1e-5 * (1 + len(t.name))},
                "tool_use": {"n": 4, "correct": 4, "accuracy": 1.0, "metric": "success", "mean_cost_usd": 1.0}}}}
            t = t.model_copy(update={"stats": stats})
        tools.append(t)
    return catalog.model_copy(update={"tools": tools})


def test_always_strongest_uses_measured_accuracy_else_the_highest_price():
    catalog = load_embedded_catalog()
    # nothing measured: the 5-sample vote is the priciest expert
    method = always_strongest(catalog)
    assert method.info["route"] == ["ask_vote:smollm2-vote5"] and "highest price" in method.description
    measured = _measured(catalog, {"ask_direct": (3, 10), "ask_program": (7, 10), "ask_vote": (5, 10)})
    method = always_strongest(measured)
    assert method.info["route"] == ["ask_program:smollm2"] and "0.70 on n=10" in method.description
    specs = specs_of(catalog, ["code_interpreter", "ask_direct", "ask_program", "ask_vote"])
    task = [{"role": "user", "content": "What is 6 * 7?"}]
    first = parse_tool_call(method.policy.chat(task, tools=specs).text)
    assert (first.name, first.arguments) == ("ask_program", {})
    # the program failed (the task did not end): it does not try anything else
    again = task + [{"role": "assistant", "content": method.policy.chat(task, tools=specs).text},
                    {"role": "tool", "content": "The program failed"}]
    assert parse_tool_call(method.policy.chat(again, tools=specs).text) is None


def test_cascade_escalates_cheapest_first_until_an_expert_ends_the_task(tmp_path):
    from toolorchestra.agent.loop import Orchestrator
    from toolorchestra.core.settings import Settings
    from toolorchestra.tools.toolbox import build_toolbox

    catalog = load_embedded_catalog().subset(["code_interpreter", "ask_direct", "ask_program", "ask_vote"])
    method = cascade(catalog, max_turns=4)
    assert method.info["route"] == ["ask_direct:smollm2", "ask_program:smollm2", "ask_vote:smollm2-vote5"]
    # the direct expert abstains, the program prints nothing, the vote answers
    replies = ["I don't know.", "```python\nx = 42\n```"] + ["42"] * 5
    expert = ScriptedLLM(replies=replies, model="smollm2")
    toolbox = build_toolbox(catalog, Settings(workspace=tmp_path), llm_for=lambda alias: expert)
    trajectory = Orchestrator(method.policy, toolbox, max_turns=4).run("What is 6 * 7?")
    assert [t.tool for t in trajectory.turns] == ["ask_direct", "ask_program", "ask_vote"]
    assert trajectory.answer == "42" and trajectory.stop_reason == "answer_tool"
    assert trajectory.model_calls == {"smollm2": 2, "smollm2-vote5": 1}
    assert trajectory.metrics()["models/smollm2-vote5"] == 1.0
    # an expert that answers at once ends the cascade there
    quick = Orchestrator(cascade(catalog, max_turns=4).policy,
                         build_toolbox(catalog, Settings(workspace=tmp_path), llm_for=lambda a: ScriptedLLM("42")),
                         max_turns=4).run("What is 6 * 7?")
    assert [t.tool for t in quick.turns] == ["ask_direct"] and quick.answer == "42"
    # the route is cut to max_turns, and with every expert asked it stops with a plain message
    short = cascade(catalog, max_turns=1)
    assert short.info["route"] == ["ask_direct:smollm2"]
    asked = [{"role": "user", "content": "q"}, {"role": "assistant", "content": short.policy.chat(
        [{"role": "user", "content": "q"}], tools=toolbox.specs()).text}, {"role": "tool", "content": "no"}]
    assert parse_tool_call(short.policy.chat(asked, tools=toolbox.specs()).text) is None


def test_cascade_orders_by_measured_cost_when_there_is_one():
    catalog = _measured(load_embedded_catalog(), {"ask_direct": (1, 2), "ask_program": (1, 2), "ask_vote": (1, 2)})
    prices = {c.tool: c.price for c in expert_choices(catalog)}
    assert prices == pytest.approx({"ask_direct": 1.1e-4, "ask_program": 1.2e-4, "ask_vote": 9e-5})  # the stats' means
    assert cascade(catalog, max_turns=3).info["route"][0] == "ask_vote:smollm2-vote5"


def test_build_methods_adds_the_fixed_routes_by_default():
    class Loaded:
        llm, manifest, ref, sha = ScriptedLLM(), {}, "runs:/x", "0" * 64

    catalog = load_embedded_catalog()
    kwargs = dict(candidate=Loaded(), champion=None, champion_note="", catalog=catalog, settings=None,
                  llm_for=lambda alias: ScriptedLLM(model=alias), seed=0, max_turns=3)
    methods, _, _ = build_methods(MethodsConfig(prompted=False), **kwargs)
    assert [m.name for m in methods] == ["trained", "expert:smollm2", "random_router", "always_strongest", "cascade"]
    assert {m.role for m in methods if m.name in ("always_strongest", "cascade")} == {"fixed"}
    methods, _, notes = build_methods(MethodsConfig(prompted=False, always_strongest=False, cascade=False), **kwargs)
    assert [m.name for m in methods][-1] == "random_router"
    basic = catalog.subset(["code_interpreter"])
    methods, _, notes = build_methods(MethodsConfig(prompted=False, experts=[]), **{**kwargs, "catalog": basic})
    assert [m.name for m in methods] == ["trained", "random_router"] and "no expert tool" in notes[0]
