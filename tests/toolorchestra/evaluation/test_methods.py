"""Baselines: the random router's routing, expert methods, batching by tool list, labels."""

from __future__ import annotations

from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.evaluation.methods import RandomRouterPolicy, expert_methods, mark_extremes
from toolorchestra.evaluation.metrics import Metrics
from toolorchestra.llm.hermes import parse_tool_call
from toolorchestra.tools.catalog import load_embedded_catalog


def specs_of(catalog, names):
    from toolorchestra.tools.toolbox import build_toolbox

    box = build_toolbox(catalog.subset(names), None, llm_for=lambda alias: ScriptedLLM())  # type: ignore[arg-type]
    return box.specs()


def test_random_router_routes_to_llm_tools_and_answers_last():
    catalog = load_embedded_catalog().subset(["answer", "enhance_reasoning", "code_interpreter"])
    specs = specs_of(catalog, ["answer", "enhance_reasoning", "code_interpreter"])
    router = RandomRouterPolicy(catalog, seed=0, max_turns=3)
    task = [{"role": "system", "content": "s"}, {"role": "user", "content": "What is 6*7?"}]
    seen = set()
    for turn in range(2):
        messages = task + [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * turn
        call = parse_tool_call(router.chat(messages, tools=specs).text)
        assert call.name in {"answer", "enhance_reasoning"} and call.arguments == {"model": "smollm2"}
        assert router.chat(messages, tools=specs).text == router.chat(messages, tools=specs).text  # seeded
        seen.add(call.name)
    last = task + [{"role": "assistant", "content": "x"}, {"role": "tool", "content": "y"}] * 2
    assert parse_tool_call(router.chat(last, tools=specs).text).name == "answer"
    plain = router.chat(task, tools=specs_of(catalog, ["code_interpreter"]))
    assert parse_tool_call(plain.text) is None and plain.usage.total_tokens == 0
    rows = router.chat_batch([task, task], tools_per_row=[specs, specs_of(catalog, ["code_interpreter"])])
    assert parse_tool_call(rows[0].text).name in {"answer", "enhance_reasoning"}
    assert parse_tool_call(rows[1].text) is None


def test_expert_methods_get_only_basic_tools():
    catalog = load_embedded_catalog()
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
