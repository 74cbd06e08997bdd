"""The embedded catalog's real tools built into a toolbox, with scripted experts."""

from __future__ import annotations

import pytest

from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM, Completion, LLMError, Usage
from toolorchestra.tools.catalog import Price, embedded_catalog_path, load_embedded_catalog, parse_catalog
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import Toolbox, build_toolbox


class Expert(LLM):
    """Replies with `reply` (or the next of a list of replies); records prompts and sampling."""

    def __init__(self, reply):
        self.model, self.reply, self.prompts, self.calls = "expert", reply, [], []

    def chat(self, messages, **kw):
        self.prompts.append(messages[-1]["content"])
        self.calls.append(kw)
        if isinstance(self.reply, Exception):
            raise self.reply
        text = self.reply[(len(self.calls) - 1) % len(self.reply)] if isinstance(self.reply, list) else self.reply
        return Completion(text=text, usage=Usage(prompt_tokens=1000, completion_tokens=100))


def paper_style_catalog():
    """The embedded catalog plus the paper's multi-model tools (a `model` argument each)."""
    import yaml

    data = yaml.safe_load(embedded_catalog_path().read_text())
    both = ["smollm2", "smollm2-vote5"]
    data["tools"] += [
        {"name": "search", "kind": "llm", "backend": {"type": "expert", "role": "search", "models": both,
                                                      "retrieval": "local_search", "max_tokens": 48}},
        {"name": "enhance_reasoning", "kind": "llm", "backend": {"type": "expert", "role": "reason", "models": both}},
    ]
    return parse_catalog(data, source="paper-style", base_dir=embedded_catalog_path().parent)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return Settings(workspace=tmp_path_factory.mktemp("ws"))


def toolbox_with(expert, settings, only):
    return build_toolbox(load_embedded_catalog(), settings, llm_for=lambda alias: expert, only=only)


def test_enhance_reasoning_runs_the_experts_code_in_the_sandbox(settings):
    expert = Expert("Here:\n```python\nprint(17 * 23)\n```")
    box = build_toolbox(paper_style_catalog(), settings, llm_for=lambda alias: expert, only=["enhance_reasoning"])
    assert box.tools["enhance_reasoning"].parameters["required"] == ["model"]  # several models: the call names one
    result = box.call("enhance_reasoning", {"model": "smollm2"}, EpisodeContext(task="What is 17 * 23?"))
    assert result.ok and "391" in result.observation and "print(17 * 23)" in result.observation
    assert "What is 17 * 23?" in expert.prompts[0]
    # 1000 + 100 tokens at the catalog's 0.02 $/Mtok, and the sandbox run at code_interpreter's price
    [(inner, seconds)] = result.inner_calls
    sandbox = paper_style_catalog().tool("code_interpreter").price
    assert inner == "code_interpreter" and 0 < seconds <= result.latency_s
    assert result.cost_usd == pytest.approx(1100 * 0.02 / 1e6 + sandbox.per_call + sandbox.per_second * seconds)
    assert result.usage["smollm2"].completion_tokens == 100


def test_search_expert_queries_the_local_corpus(settings):
    box = build_toolbox(paper_style_catalog(), settings, llm_for=lambda alias: Expert("capital of Australia"),
                        only=["search"])
    result = box.call("search", {"model": "smollm2"}, EpisodeContext(task="Which city is Australia's capital?"))
    assert result.ok and "Canberra" in result.observation
    [(inner, seconds)] = result.inner_calls  # the retrieval it ran, billed as a local_search call
    assert inner == "local_search"
    assert result.cost_usd == pytest.approx(1100 * 0.02 / 1e6 + paper_style_catalog().tool("local_search").price.per_call)


def test_embedded_basic_tools_take_one_argument(settings):
    box = toolbox_with(Expert(""), settings, ["code_interpreter", "web_search"])
    assert box.tools["code_interpreter"].parameters["properties"] == {"code": {"type": "string"}}
    assert box.call("web_search", {"query": "x", "max_results": 3}).error == "invalid_arguments"


def test_code_interpreter_costs_per_call_and_second(settings):
    box = toolbox_with(Expert(""), settings, ["code_interpreter"])
    result = box.call("code_interpreter", {"code": "print(2 ** 10)"})
    assert result.ok and "1024" in result.observation
    price = load_embedded_catalog().tool("code_interpreter").price
    assert result.cost_usd == pytest.approx(price.per_call + price.per_second * result.latency_s)


def test_embedded_code_interpreter_ends_the_task_with_one_printed_value(settings):
    box = toolbox_with(Expert(""), settings, ["code_interpreter"])
    result = box.call("code_interpreter", {"code": "print(17 * 23)"})
    assert result.data["final"] and result.data["answer"] == "391"
    assert not box.call("code_interpreter", {"code": "print([17, 23])"}).data.get("final")


def test_web_search_without_key_says_not_configured(settings, monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    box = toolbox_with(Expert(""), settings, ["web_search"])
    result = box.call("web_search", {"query": "anything"})
    assert not result.ok and result.error == "tool_error" and "TAVILY_API_KEY" in result.observation


def test_with_models_on_first_use_an_expert_loads_its_model_at_its_first_call(settings):
    # `orchestra ask` builds every expert of the catalog, and most of its episodes ask none:
    # loading their engines up front cost ~1.3 s of a 12 s answer (2026-12-06).
    built = []

    def llm_for(alias):
        built.append(alias)
        return Expert("42")

    box = build_toolbox(paper_style_catalog(), settings, llm_for=llm_for, models_on_first_use=True,
                        only=["ask_direct", "enhance_reasoning"])
    assert built == []
    # the schema and description still name every model
    assert box.tools["enhance_reasoning"].parameters["properties"]["model"]["enum"] == ["smollm2", "smollm2-vote5"]
    assert box.tools["ask_direct"].description.endswith("Model: smollm2.")
    assert "smollm2" in box.tools["enhance_reasoning"].llms and built == []  # asking which models it has builds none
    assert box.call("ask_direct", {}, EpisodeContext(task="What is 6 * 7?")).ok
    assert built == ["smollm2"]
    box.call("ask_direct", {}, EpisodeContext(task="What is 6 * 7?"))
    assert built == ["smollm2"]  # once per tool
    assert box.call("enhance_reasoning", {"model": "gpt-9"}, EpisodeContext(task="q")).error == "invalid_arguments"
    assert built == ["smollm2"]
    build_toolbox(paper_style_catalog(), settings, llm_for=llm_for, only=["ask_direct"])
    assert built == ["smollm2", "smollm2"]  # the default: up front, so a broken model stops a stage at once


def test_expert_endpoint_failure_is_an_observation(settings):
    box = toolbox_with(Expert(LLMError("endpoint timed out")), settings, ["ask_direct"])
    result = box.call("ask_direct", {}, EpisodeContext(task="q"))
    assert result.error == "llm_error" and "endpoint timed out" in result.observation


def test_single_model_experts_take_no_model_argument(settings):
    box = toolbox_with(Expert("42"), settings, ["ask_direct", "ask_program", "ask_vote"])
    for name in ("ask_direct", "ask_program", "ask_vote"):
        assert box.tools[name].parameters == {"type": "object", "additionalProperties": False,
                                              "properties": {"question": {"type": "string"}}}
    assert box.tools["ask_vote"].description.endswith("Model: smollm2-vote5.")  # the policy can tell the models apart
    result = box.call("ask_direct", {"model": "smollm2"}, EpisodeContext(task="q"))  # nothing to get wrong
    assert result.error == "invalid_arguments"
    result = box.call("ask_direct", {}, EpisodeContext(task="What is 6 * 7?"))
    assert result.ok and result.data == {"final": True, "answer": "42"} and set(result.usage) == {"smollm2"}


def test_program_expert_stops_at_the_closing_fence_and_runs_the_cut_reply(settings):
    # what a stop-taking backend returns: the reply up to the closing fence, the fence left out
    expert = Expert("```python\nprint(17 * 23)")
    result = toolbox_with(expert, settings, ["ask_program"]).call(
        "ask_program", {}, EpisodeContext(task="What is 17 * 23?"))
    assert expert.calls[0]["stop"] == ["\n```\n"] and result.ok and result.data["answer"] == "391"
    direct = Expert("391")
    toolbox_with(direct, settings, ["ask_direct"]).call("ask_direct", {}, EpisodeContext(task="17 * 23?"))
    assert direct.calls[0]["stop"] is None  # only the program role has a stop string


def test_program_expert_answers_with_what_its_program_prints(settings):
    box = toolbox_with(Expert("```python\nx = 17 * 23\nprint('steps')\nprint(x)\n```"), settings, ["ask_program"])
    result = box.call("ask_program", {}, EpisodeContext(task="What is 17 * 23?"))
    assert result.ok and result.data["final"] and result.data["answer"] == "391"
    # the expert's tokens, plus its sandbox run billed exactly as the policy's own code_interpreter
    # call is (per call + per second): before, the expert's run was billed its per-call price only
    sandbox = load_embedded_catalog().tool("code_interpreter").price
    [(inner, seconds)] = result.inner_calls
    assert inner == "code_interpreter" and seconds > 0.01  # a real sandbox process ran
    assert result.cost_usd == pytest.approx(1100 * 0.02 / 1e6 + sandbox.per_call + sandbox.per_second * seconds)


def test_an_experts_sandbox_run_is_billed_under_the_catalogs_name_for_the_code_tool(settings):
    import yaml

    data = yaml.safe_load(embedded_catalog_path().read_text())
    for tool in data["tools"]:
        if tool["name"] == "code_interpreter":
            tool["name"], tool["price"] = "python", {"per_call": 0.5}
    catalog = parse_catalog(data, source="renamed", base_dir=embedded_catalog_path().parent)
    box = build_toolbox(catalog, settings, llm_for=lambda alias: Expert("```python\nprint(6 * 7)\n```"),
                        only=["python", "ask_program"])
    assert set(box.tools) == {"python", "ask_program"}  # offered and priced under the catalog's name
    assert box.call("python", {"code": "print(1)"}).cost_usd == pytest.approx(0.5)
    result = box.call("ask_program", {}, EpisodeContext(task="What is 6 * 7?"))
    assert result.data["answer"] == "42" and [name for name, _ in result.inner_calls] == ["python"]
    assert result.cost_usd == pytest.approx(0.5 + 1100 * 0.02 / 1e6)
    assert box.cost_bound("ask_program", {}, EpisodeContext(task="q")) >= 0.5  # a budget sees the run coming


@pytest.mark.parametrize("reply, why", [
    ("```python\nraise SystemExit(3)\n```", "failed"),
    ("```python\nx = 1\n```", "printed nothing"),
    ("I would compute it.", "wrote no program"),
])
def test_a_program_that_fails_or_prints_nothing_does_not_end_the_task(settings, reply, why):
    result = toolbox_with(Expert(reply), settings, ["ask_program"]).call(
        "ask_program", {}, EpisodeContext(task="What is 17 * 23?"))
    assert not result.ok and not result.data["final"] and why in result.observation
    assert "not finished" in result.observation


def test_vote_expert_samples_k_answers_and_takes_the_majority(settings):
    expert = Expert(["41", "6 * 7 = 42.", "42", "I don't know", "42.0"])
    box = toolbox_with(expert, settings, ["ask_vote"])
    result = box.call("ask_vote", {}, EpisodeContext(task="What is 6 * 7?"))
    assert result.ok and result.data["final"] and result.data["answer"] == "42"  # votes on the final number
    assert result.data["votes"] == 3 and "3/5" in result.observation
    # five real samples, each seeded differently at the catalog's temperature, billed under the vote alias
    assert len(expert.calls) == 5 and {c["temperature"] for c in expert.calls} == {0.7}
    assert len({c["seed"] for c in expert.calls}) == 5
    assert result.usage == {"smollm2-vote5": Usage(prompt_tokens=5000, completion_tokens=500)}
    assert result.cost_usd == pytest.approx(5 * 1100 * 0.02 / 1e6)
    # the same prompt samples the same seeds again: repeatable
    again = Expert(["41", "6 * 7 = 42.", "42", "I don't know", "42.0"])
    toolbox_with(again, settings, ["ask_vote"]).call("ask_vote", {}, EpisodeContext(task="What is 6 * 7?"))
    assert [c["seed"] for c in again.calls] == [c["seed"] for c in expert.calls]


def test_a_text_vote_delivers_the_first_winning_reply(settings):
    box = toolbox_with(Expert(["Lima.", "It is Cusco", "lima", "Lima!", "Cusco"]), settings, ["ask_vote"])
    result = box.call("ask_vote", {}, EpisodeContext(task="What is the capital of Peru?"))
    assert result.data["answer"] == "Lima." and result.data["votes"] == 3


def test_vote_cost_bound_counts_every_sample(settings):
    box = toolbox_with(Expert("1"), settings, ["ask_vote", "ask_direct"])
    context = EpisodeContext(task="What is 6 * 7?")
    vote, direct = box.cost_bound("ask_vote", {}, context), box.cost_bound("ask_direct", {}, context)
    assert vote == pytest.approx(5 * direct)  # same prompt and max_tokens, five samples


@pytest.mark.parametrize("tool", ["ask_direct", "ask_vote"])
def test_an_abstaining_expert_does_not_end_the_task(settings, tool):
    result = toolbox_with(Expert(["I don't know.", ""]), settings, [tool]).call(tool, {}, EpisodeContext(task="q"))
    assert not result.ok and result.data["final"] is False and "not finished" in result.observation
    assert result.cost_usd > 0  # the expert still ran


def test_long_observations_are_truncated():
    from toolorchestra.tools.base import Tool, ToolOutput

    class Loud(Tool):
        name, description, parameters = "loud", "d", {"type": "object"}

        def run(self, arguments):
            return ToolOutput(content="x" * 10_000)

    result = Toolbox([Loud()], prices={"loud": Price(per_call=1.0)}).call("loud", {})
    assert len(result.observation) < 4200 and "truncated 6000 characters" in result.observation
    assert result.cost_usd == pytest.approx(1.0)


def test_a_failed_program_keeps_its_exception_when_its_observation_is_cut(tmp_path):
    """A trained policy's toolbox cuts observations at its training limit (400 characters in the
    demo): cut from the head only, a wrong table name's traceback lost the line naming the tables."""
    from helpers.domains import events_db

    from toolorchestra.envs.domain import Domain
    from toolorchestra.envs.records import sandbox_files
    from toolorchestra.episodes.environment import scope_to_domain
    from toolorchestra.tools.code_interpreter import CodeInterpreter

    domain = Domain("events", events_db())
    code = scope_to_domain(CodeInterpreter(), domain.name, sandbox_files(domain))
    box = Toolbox([code], max_observation_chars=400)
    result = box.call("code_interpreter", {"code": "def deep(n):\n    return deep(n - 1) if n else find('plats', 'id', 'x')\n"
                                                   "print(deep(8))"})
    assert len(result.observation) < 700 and "[truncated" in result.observation
    assert result.observation.startswith("exit status: 1")
    assert result.observation.rsplit("\n", 1)[-1].startswith("KeyError: \"no table 'plats'; tables: ")
    # other tools are still cut from the head only: a search's best passage comes first
    from toolorchestra.tools.base import Tool, ToolOutput

    class Search(Tool):
        name, description, parameters = "search", "d", {"type": "object"}

        def run(self, arguments):
            return ToolOutput(content="passage\n" * 100 + "last passage")

    cut = Toolbox([Search()], max_observation_chars=400).call("search", {}).observation
    assert cut.startswith("passage\n") and "last passage" not in cut and "[truncated" in cut


def test_unknown_tool_in_subset_is_rejected(settings):
    with pytest.raises(ValueError, match="not in the catalog"):
        toolbox_with(Expert(""), settings, ["no_such_tool"])


def test_shown_schema_leaves_out_validation_only_keywords_which_the_toolbox_still_enforces():
    from toolorchestra.tools.base import Tool, ToolOutput
    from toolorchestra.tools.toolbox import Toolbox

    class Echo(Tool):
        name, description = "echo", "Echo a word."
        parameters = {"type": "object", "additionalProperties": False, "required": ["word"],
                      "properties": {"word": {"type": "string", "minLength": 2, "pattern": "^[a-z]+$"},
                                     "pattern": {"type": "integer", "maximum": 3, "default": 1}}}

        def run(self, arguments):
            return ToolOutput(content=arguments["word"])

    shown = Echo().spec()["function"]["parameters"]
    assert shown == {"type": "object", "required": ["word"],
                     "properties": {"word": {"type": "string"}, "pattern": {"type": "integer", "maximum": 3}}}
    box = Toolbox([Echo()])
    assert box.call("echo", {"word": "hi"}).ok
    for bad in ({"word": "h"}, {"word": "Hi"}, {"word": "hi", "extra": 1}):
        assert box.call("echo", bad).error == "invalid_arguments"
