"""The embedded catalog's real tools built into a toolbox, with scripted experts."""

from __future__ import annotations

import pytest

from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM, Completion, LLMError, Usage
from toolorchestra.tools.catalog import Price, load_embedded_catalog
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import Toolbox, build_toolbox


class Expert(LLM):
    def __init__(self, reply):
        self.model, self.reply, self.prompts = "expert", reply, []

    def chat(self, messages, **kw):
        self.prompts.append(messages[-1]["content"])
        if isinstance(self.reply, Exception):
            raise self.reply
        return Completion(text=self.reply, usage=Usage(prompt_tokens=1000, completion_tokens=100))


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    return Settings(workspace=tmp_path_factory.mktemp("ws"))


def toolbox_with(expert, settings, only):
    return build_toolbox(load_embedded_catalog(), settings, llm_for=lambda alias: expert, only=only)


def test_enhance_reasoning_runs_the_experts_code_in_the_sandbox(settings):
    expert = Expert("Here:\n```python\nprint(17 * 23)\n```")
    box = toolbox_with(expert, settings, ["enhance_reasoning"])
    result = box.call("enhance_reasoning", {"model": "smollm2"}, EpisodeContext(task="What is 17 * 23?"))
    assert result.ok and "391" in result.observation and "print(17 * 23)" in result.observation
    assert "What is 17 * 23?" in expert.prompts[0]
    # 1000 + 100 tokens at the catalog's 0.02 $/Mtok
    assert result.cost_usd == pytest.approx(1100 * 0.02 / 1e6)
    assert result.usage["smollm2"].completion_tokens == 100


def test_search_expert_queries_the_local_corpus(settings):
    box = toolbox_with(Expert("capital of Australia"), settings, ["search"])
    result = box.call("search", {"model": "smollm2"}, EpisodeContext(task="Which city is Australia's capital?"))
    assert result.ok and "Canberra" in result.observation
    assert result.cost_usd > 0


def test_code_interpreter_costs_per_call_and_second(settings):
    box = toolbox_with(Expert(""), settings, ["code_interpreter"])
    result = box.call("code_interpreter", {"code": "print(2 ** 10)"})
    assert result.ok and "1024" in result.observation
    price = load_embedded_catalog().tool("code_interpreter").price
    assert result.cost_usd == pytest.approx(price.per_call + price.per_second * result.latency_s)


def test_web_search_without_key_says_not_configured(settings, monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    box = toolbox_with(Expert(""), settings, ["web_search"])
    result = box.call("web_search", {"query": "anything"})
    assert not result.ok and result.error == "tool_error" and "TAVILY_API_KEY" in result.observation


def test_expert_endpoint_failure_is_an_observation(settings):
    box = toolbox_with(Expert(LLMError("endpoint timed out")), settings, ["answer"])
    result = box.call("answer", {"model": "smollm2"}, EpisodeContext(task="q"))
    assert result.error == "llm_error" and "endpoint timed out" in result.observation


def test_long_observations_are_truncated():
    from toolorchestra.tools.base import Tool, ToolOutput

    class Loud(Tool):
        name, description, parameters = "loud", "d", {"type": "object"}

        def run(self, arguments):
            return ToolOutput(content="x" * 10_000)

    result = Toolbox([Loud()], prices={"loud": Price(per_call=1.0)}).call("loud", {})
    assert len(result.observation) < 4200 and "truncated 6000 characters" in result.observation
    assert result.cost_usd == pytest.approx(1.0)


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
