"""Fixtures shared by the episode, training, preferences and describe tests: a small validated
task folder (tool use + QA) and its instances, a rollout environment with a scripted expert, a
golden policy, the tiny random-weight model saved as a model folder (GRPO loads models from a
path), and the preferences tests' validated folder and two-expert catalog. A subpackage's own
conftest overrides a fixture of the same name (evaluation, registry, serving do)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.pref_fixtures import expert_catalog_data, write_validated

from toolorchestra.llm.base import LLM, Completion, Usage


class ScriptedExpert(LLM):
    """An expert LLM that always replies with the same text (no model loading in tests)."""

    def __init__(self, reply: str = "42", model: str = "smollm2") -> None:
        self.reply, self.model, self.calls = reply, model, 0

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        self.calls += 1
        return Completion(text=self.reply, usage=Usage(prompt_tokens=50, completion_tokens=5), latency_s=0.01,
                          model=self.model)


def write_tasks_folder(root: Path, *, tasks: int = 12, qa: int = 4, seed: int = 0) -> Path:
    """`root/toolscale/library/...` (easy procedural tasks) and `root/qa/library.jsonl`."""
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.synthesis.procedural import ProceduralConfig

    domain = load_embedded("library", seed=seed, size=20)
    easy = ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0)
    result = synthesize_domain(domain, tasks=tasks, seed=seed, qa=qa, evolve_fraction=0.0, config=easy)
    write_domain_folder(root / "toolscale" / "library", result, qa_file=root / "qa" / "library.jsonl",
                        docs_file=root / "qa" / "docs" / "library.jsonl")
    return root


@pytest.fixture(scope="session")
def rl_tasks(tmp_path_factory) -> Path:
    return write_tasks_folder(tmp_path_factory.mktemp("validated"))


@pytest.fixture(scope="session")
def answer_catalog():
    """The embedded catalog's models with one paper-style `answer` expert: the SmolLM2 alias
    (replaced by a script), named by an explicit `model` argument."""
    from toolorchestra.tools.catalog import load_embedded_catalog

    catalog = load_embedded_catalog()
    answer = catalog.tool("ask_direct").model_copy(update={
        "name": "answer", "description": "Ask an expert model for the final answer. Ends the task.",
        "parameters": {"type": "object", "additionalProperties": False, "required": ["model"], "properties": {
            "model": {"type": "string", "enum": ["smollm2"], "description": "which expert to ask"},
            "question": {"type": "string", "description": "what to ask; defaults to the task"}}}})
    return catalog.model_copy(update={"tools": [answer]})


@pytest.fixture(scope="session")
def expert() -> ScriptedExpert:
    return ScriptedExpert()


@pytest.fixture(scope="session")
def records_qa(tmp_path_factory, settings, expert):
    """(environment, training QA instances) of a library domain with calculations, lookups, counts
    and aggregates, whose episodes offer the code interpreter (holding the domain's records) and
    local search (over its passages)."""
    from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.preferences.assemble import build_instances
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.tools.catalog import load_embedded_catalog

    root = tmp_path_factory.mktemp("records_qa") / "validated"
    result = synthesize_domain(load_embedded("library", seed=0, size=20), tasks=2, seed=0, qa=24,
                               arithmetic_fraction=0.4, evolve_fraction=0.0)
    write_domain_folder(root / "toolscale" / "library", result, qa_file=root / "qa" / "library.jsonl",
                        docs_file=root / "qa" / "docs" / "library.jsonl")
    catalog = load_embedded_catalog().with_search_corpus(root / "qa" / "docs").subset(["code_interpreter", "local_search"])
    instances = [i for i in build_instances(root, catalog, include_policy=False, eval_task_fraction=0.2, seed=0)["train"]
                 if i.kind == "qa"]
    env = RolloutEnvironment(catalog, settings, DomainLocator([root]), EpisodeConfig(max_observation_chars=800),
                             llm_for=lambda alias: expert)
    return env, instances, root, catalog


@pytest.fixture(scope="session")
def splits(rl_tasks, answer_catalog):
    from toolorchestra.preferences.assemble import build_instances

    return build_instances(rl_tasks, answer_catalog, include_policy=False, eval_task_fraction=0.2, seed=0)


@pytest.fixture(scope="session")
def tool_use(splits):
    return [i for i in splits["train"] if i.kind == "tool_use"]


@pytest.fixture(scope="session")
def settings(tmp_path_factory):
    from toolorchestra.core.settings import Settings

    root = tmp_path_factory.mktemp("workspace")
    return Settings(workspace=root, state_dir=root / ".orchestra")


@pytest.fixture
def make_env(rl_tasks, answer_catalog, settings, expert):
    from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator

    def make(expert_llm: LLM | None = None, **config) -> RolloutEnvironment:
        chosen = expert_llm or expert
        return RolloutEnvironment(answer_catalog, settings, DomainLocator([rl_tasks]), EpisodeConfig(**config),
                                  llm_for=lambda alias: chosen)

    return make


class GoldenPolicy(LLM):
    """Plays each tool-use instance's golden calls, then states the communicate values; `mode`
    breaks it on purpose: `malformed` (broken JSON), `wrong` (answers without calling anything),
    `answer_tool` (QA: calls the `answer` expert)."""

    def __init__(self, instances, mode: str = "golden", model: str = "golden") -> None:
        self.by_prompt = {i.prompt[-1]["content"]: i for i in instances}
        self.mode, self.model = mode, model

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        from toolorchestra.llm.hermes import format_tool_call

        instance = self.by_prompt[messages[1]["content"]]
        done = sum(m["role"] == "assistant" for m in messages)
        if self.mode == "malformed":
            text = '<tool_call>\n{"name": "get_member_details", "arguments": {oops}\n</tool_call>'
        elif self.mode == "wrong":
            text = "I cannot help with that."
        elif self.mode == "answer_tool":
            text = format_tool_call("answer", {"model": "smollm2"})
        else:
            actions = instance.tau2_task.actions
            if done < len(actions):
                text = format_tool_call(actions[done].name, actions[done].arguments)
            else:
                text = "Done. " + "; ".join(instance.tau2_task.communicate_info)
        return Completion(text=text, usage=Usage(prompt_tokens=400, completion_tokens=30), latency_s=0.05,
                          model=self.model)


@pytest.fixture(scope="session")
def tiny_dir(tiny_llm, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_llm.lm.save_pretrained(folder)
    tiny_llm.tokenizer.save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    return folder


@pytest.fixture(scope="session")
def golden_policy():
    """The `GoldenPolicy` class (build it with instances and a mode)."""
    return GoldenPolicy


@pytest.fixture(scope="session")
def scripted_expert():
    """The `ScriptedExpert` class (an expert LLM with a fixed reply)."""
    return ScriptedExpert


@pytest.fixture
def validated(tmp_path: Path) -> Path:
    return write_validated(tmp_path / "validated")


@pytest.fixture
def expert_catalog(tmp_path: Path):
    from toolorchestra.tools.catalog import parse_catalog

    return parse_catalog(expert_catalog_data(), source="<test catalog>", base_dir=tmp_path)
