"""The vLLM rollout adapter (GPU-only engine): requests carry the token-exact contexts and the
stop rules, replies are cut like the transformers path's, and the CPU refuses it clearly.

vLLM is not installed on the CPU machines, so `vllm.SamplingParams` and the engine are stand-ins
with vLLM's interface (`LLM.generate(prompts, sampling_params=..., use_tqdm=...)` returning
request outputs whose `outputs[0].token_ids` are the new tokens)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.rl.config import GRPOSettings
from toolorchestra.rl.trl_backend import vllm_args
from toolorchestra.rl.vllm_rollouts import VLLMRollouts

TOOLS = [{"type": "function", "function": {
    "name": "get_member", "description": "Look up a library member.",
    "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]


class SamplingParams(SimpleNamespace):
    pass


class FakeLLM:
    """Replies with scripted new tokens; records the requests."""

    def __init__(self, replies):
        self.replies, self.requests = replies, []

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.requests.append((prompts, sampling_params))
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(r))]) for r in self.replies[: len(prompts)]]


@pytest.fixture
def fake_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=SamplingParams))


def test_a_turn_is_one_request_per_rollout_with_the_encoders_context(fake_vllm, tiny_llm):
    tokenizer = tiny_llm.tokenizer
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    call = tokenizer(format_tool_call("get_member", {"id": "M-7"}), add_special_tokens=False)["input_ids"]
    # vLLM may return tokens past the stop string's completion in odd tokenisations; eos ends a reply.
    llm = FakeLLM([call, [11, 12, eos]])
    factory = VLLMRollouts(seed=1)
    factory.llm = llm
    policy = factory(tiny_llm.lm, tokenizer)
    batch = [[{"role": "user", "content": f"Who is member M-{i}?"}] for i in range(2)]
    for messages in batch:
        policy.bind(messages, TOOLS)
    replies = policy.chat_batch(batch, max_tokens=32, temperature=1.0)
    prompts, params = llm.requests[0]
    assert [p["prompt_token_ids"] for p in prompts] == [policy.context(m) for m in batch]
    assert all(p.stop == ["</tool_call>"] and p.include_stop_str_in_output and p.stop_token_ids == [eos]
               and p.max_tokens == 32 and p.temperature == 1.0 for p in params)
    assert params[0].seed != params[1].seed  # a group's rollouts must not share a sampler seed
    assert policy.sampled(batch[0]) == [call] and policy.sampled(batch[1]) == [[11, 12, eos]]
    assert replies[0].text.endswith("</tool_call>") and replies[1].finish_reason == "stop"


def test_the_engine_must_come_from_the_trainer():
    with pytest.raises(ConfigError, match="colocated vLLM"):
        VLLMRollouts().bind_trainer(SimpleNamespace(vllm_generation=None))


def test_vllm_rollouts_are_refused_on_a_cpu_and_configure_trl_on_a_gpu():
    settings = GRPOSettings(rollout_engine="vllm", max_completion_length=512)
    with pytest.raises(ConfigError, match="CUDA"):
        vllm_args(settings, use_cpu=True)
    args = vllm_args(settings, use_cpu=False)
    assert args["use_vllm"] and args["vllm_mode"] == "colocate" and not args["vllm_enable_sleep_mode"]
    assert vllm_args(GRPOSettings(), use_cpu=True) == {}
