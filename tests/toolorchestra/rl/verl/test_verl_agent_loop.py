"""Our BaseTool adapters execute the project's tools inside verl's ToolAgentLoop (our registered
`orchestra_agent` subclass), driven by a scripted server, as verl's own CPU tests drive it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import yaml
from omegaconf import OmegaConf

from toolorchestra.episodes.rows import verl_row
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.rl.config import TrainConfig
from toolorchestra.rl.verl.data import AGENT_NAME


class ScriptedServer:
    """Stands in for verl's LLM server: returns the token ids of the next scripted reply."""

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids))


def golden_replies(instance) -> list[str]:
    calls = [format_tool_call(a.name, a.arguments) for a in instance.tau2_task.actions]
    return [*calls, "Done. " + "; ".join(instance.tau2_task.communicate_info)]


@pytest.fixture
def loop_factory(tiny_llm, rl_tasks, answer_catalog, settings, expert, tmp_path, monkeypatch):
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from toolorchestra.rl.checkpoint import catalog_dict
    from toolorchestra.rl.verl import episode as episode_module
    from toolorchestra.rl.verl.agent_loop import OrchestraAgentLoop
    from toolorchestra.rl.verl.data import collect_specs, tool_config

    catalog_file = tmp_path / "catalog.json"
    catalog_file.write_text(json.dumps(catalog_dict(answer_catalog, tmp_path)))
    real_environment = episode_module.environment

    def environment(catalog, roots, episode=None):  # the worker's environment, with a scripted expert
        env = real_environment(catalog, roots, episode)
        env.llm_for = lambda alias: expert
        return env

    monkeypatch.setattr("toolorchestra.rl.verl.agent_loop.environment", environment)
    config = OmegaConf.create({
        "actor_rollout_ref": {
            "rollout": {"prompt_length": 8192, "response_length": 4096, "n": 2, "full_determinism": False,
                        "multi_turn": {"max_user_turns": 8, "max_assistant_turns": 8, "max_parallel_calls": 1,
                                       "max_tool_response_length": 2000, "tool_response_truncate_side": "right",
                                       "format": "hermes", "tool_config_path": None}},
            "model": {"path": "dummy-model", "tokenizer_path": "dummy-model"},
        },
        "data": {"tool_config_path": None, "apply_chat_template_kwargs": {}},
    })

    async def build(replies):
        specs = collect_specs([[{"type": "function", "function": {"name": "placeholder", "description": "unused",
                                                                   "parameters": {"type": "object", "properties": {}}}}]])
        tools_file = tmp_path / "tools.yaml"
        tools_file.write_text(yaml.safe_dump(tool_config(specs)))
        server = ScriptedServer(tiny_llm.tokenizer, replies)
        loop = OrchestraAgentLoop(
            trainer_config=DictConfigWrap(config), server_manager=server, tokenizer=tiny_llm.tokenizer, processor=None,
            dataset_cls=RLHFDataset, data_config=DictConfigWrap(config.data),
            tools=ToolListWrap(initialize_tools_from_config(str(tools_file))),
            name="orchestra_agent", catalog=str(catalog_file), data_roots=[str(rl_tasks)],
            episode=TrainConfig().episode.model_dump(mode="json") | {"max_domain_tools": 3},
        )
        return loop, server

    def play(instance, replies, uid="group-1", session=0):
        """Run one trajectory (verl's loops bind to the running event loop: build them inside it)."""
        row = verl_row(instance, 0, AGENT_NAME, instance.tools)

        async def main():
            loop, server = await build(replies)
            out = await loop.run({"temperature": 1.0}, raw_prompt=row["prompt"], extra_info=row["extra_info"],
                                 data_source=row["data_source"], uid=uid, session_id=session)
            return out, server

        return asyncio.run(main())

    return play


def test_adapters_execute_our_tools_inside_tool_agent_loop(loop_factory, tool_use, tiny_llm):
    instance = next(i for i in tool_use if i.tau2_task.communicate_info)
    out, server = loop_factory(instance, golden_replies(instance))
    record = out.extra_fields["orchestra"]
    assert record["correct"] and record["valid"] and record["format_valid"], record
    assert record["group"] == "group-1" and record["group_size"] == 2 and record["session"] == 0
    assert record["details"] == {"db": 1.0, "action": 1.0, "communicate": 1.0}
    for action in instance.tau2_task.actions:
        assert record["metrics"][f"calls/{action.name}"] >= 1
    assert record["metrics"]["cost"] > 0
    assert not server.replies  # every scripted turn was asked for: the loop went through all calls
    # The observations went into the context as masked tokens, the calls as trained ones.
    tokenizer = tiny_llm.tokenizer
    response, mask = list(out.response_ids), list(out.response_mask)
    observed = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if not m])
    generated = tokenizer.decode([t for t, m in zip(response, mask, strict=True) if m])
    assert "<tool_response>" in observed and "<tool_response>" not in generated
    assert generated.count("<tool_call>") == len(instance.tau2_task.actions)
    # The tools the model saw were this episode's (capped) tools, not the YAML's placeholder.
    first_prompt = tokenizer.decode(server.prompts[0])
    assert "placeholder" not in first_prompt
    assert all(name in first_prompt for name in instance.required_tools)


def test_answer_tool_ends_the_trajectory_and_bad_calls_are_recorded(loop_factory, splits, tool_use):
    qa = next(i for i in splits["train"] if i.kind == "qa")
    out, server = loop_factory(qa, [format_tool_call("answer", {"model": "smollm2"}), "never asked"])
    record = out.extra_fields["orchestra"]
    assert server.replies == ["never asked"]  # stopped after the answer tool
    assert record["valid"] and record["metrics"]["calls/answer"] == 1.0
    instance = tool_use[0]
    out, _ = loop_factory(instance, ['<tool_call>\n{"name": oops}\n</tool_call>', "Bye."])
    record = out.extra_fields["orchestra"]
    assert not record["format_valid"] and not record["valid"] and not record["correct"]


def test_a_verl_episode_answers_a_repeat_of_the_call_that_just_failed_unrun(make_env, tool_use):
    """As in the agent loop (`agent.loop.repeated_failure`): a domain tool is deterministic, so its
    failed call repeated as is is not run again; a changed call runs."""
    from toolorchestra.rl.verl.episode import VerlEpisode

    env = make_env(max_domain_tools=3)
    task, action = next((t, a) for t in tool_use for a in t.tau2_task.actions if a.name.startswith("get_"))
    episode = VerlEpisode.start(env, task)
    id_param = next(iter(action.arguments))
    wrong = {**action.arguments, id_param: "NO-SUCH-ID"}
    first = episode.call(action.name, wrong)
    repeat = episode.call(action.name, wrong)
    right = episode.call(action.name, dict(action.arguments))
    assert (first.ok, first.error) == (False, "tool_error")
    assert (repeat.ok, repeat.error, repeat.cost_usd) == (False, "repeated_call", 0.0) and "not run" in repeat.observation
    assert right.ok


def test_a_verl_trajectory_bills_each_turns_repeat_of_the_previous_context_at_the_cached_price(make_env, tool_use):
    from toolorchestra.rl.verl.episode import VerlEpisode

    env = make_env()
    episode = VerlEpisode.start(env, tool_use[0])
    trajectory = episode.trajectory([('<tool_call>{"name": oops}</tool_call>', 500, 20), ("Bye.", 560, 5)], 1.0)
    price = env.policy_price(tool_use[0])
    first, second = trajectory.turns
    assert first.cost_usd == pytest.approx((500 * price.input_per_mtok + 20 * price.output_per_mtok) / 1e6)
    assert second.cost_usd == pytest.approx(
        (500 * price.cached_input_per_mtok + 60 * price.input_per_mtok + 5 * price.output_per_mtok) / 1e6)
