"""Token-exact transcripts: masks cover exactly the policy's tokens; rollout contexts are prefixes."""

from __future__ import annotations

import pytest

from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.rl.transcript import RolloutPolicy, TranscriptEncoder, TranscriptError

TOOLS = [{"type": "function", "function": {"name": "get_member", "description": "a member by id",
                                           "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]


def transcript():
    return [
        {"role": "system", "content": "You are an orchestrator."},
        {"role": "user", "content": "What is the tier of member M-7?"},
        {"role": "assistant", "content": format_tool_call("get_member", {"id": "M-7"})},
        {"role": "tool", "content": '{"id": "M-7", "tier": "plus"}'},
        {"role": "assistant", "content": "The tier is plus."},
    ]


@pytest.fixture(scope="module")
def tokenizer(tiny_llm):
    return tiny_llm.tokenizer


def test_encoding_matches_the_chat_template_and_masks_only_assistant_tokens(tokenizer):
    encoder = TranscriptEncoder(tokenizer)
    messages = transcript()
    encoded = encoder.encode(messages, TOOLS)
    rendered = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    text = tokenizer.decode(encoded.ids)
    assert rendered.startswith(text) and rendered[len(text):].strip() == ""  # only the template's final newline
    trained = tokenizer.decode([t for t, m in zip(encoded.ids, encoded.mask, strict=True) if m])
    assert trained == (format_tool_call("get_member", {"id": "M-7"}) + "<|im_end|>" + "The tier is plus.<|im_end|>")
    untrained = tokenizer.decode([t for t, m in zip(encoded.ids, encoded.mask, strict=True) if not m])
    assert "<tool_response>" in untrained and '"tier": "plus"' in untrained and "get_member" in untrained
    assert encoded.prompt_ids == encoder.encode(messages[:2], TOOLS, generation_prompt=True).ids


def test_rollout_context_of_each_turn_is_a_prefix_of_the_training_sequence(tokenizer):
    encoder = TranscriptEncoder(tokenizer)
    messages = transcript()
    full = encoder.encode(messages, TOOLS)
    for cut in (2, 4):  # before the first and the second assistant turn
        context = encoder.encode(messages[:cut], TOOLS, generation_prompt=True).ids
        assert full.ids[: len(context)] == context
    assert not any(full.mask[: full.prompt_len])  # the prompt never carries loss


def test_sampled_ids_are_used_verbatim_and_an_inserted_eos_is_not_trained(tokenizer):
    encoder = TranscriptEncoder(tokenizer)
    messages = transcript()
    # The policy stopped right after </tool_call> (no eos), then answered with an odd tokenisation.
    call_ids = encoder.text_ids(messages[2]["content"])
    odd = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.tokenize("The tier is plus.")]
    encoded = encoder.encode(messages, TOOLS, sampled=[call_ids, odd + [encoder.eos_id]])
    start = encoded.prompt_len
    assert encoded.ids[start:start + len(call_ids)] == call_ids
    assert encoded.mask[start:start + len(call_ids)] == [1] * len(call_ids)
    eos_at = start + len(call_ids)
    assert encoded.ids[eos_at] == encoder.eos_id and encoded.mask[eos_at] == 0  # inserted by the template
    assert encoded.ids[-len(odd) - 1:] == odd + [encoder.eos_id] and encoded.mask[-len(odd) - 1:] == [1] * (len(odd) + 1)


def test_an_empty_sampled_reply_encodes_as_what_was_sampled(tokenizer):
    """A policy that ends its turn at once (eos first) leaves an empty assistant message, which the
    template renders without the generation prompt's newline: the rollout still encodes."""
    encoder = TranscriptEncoder(tokenizer)
    messages = transcript()[:4] + [{"role": "assistant", "content": ""}]
    call_ids = encoder.text_ids(messages[2]["content"])
    encoded = encoder.encode(messages, TOOLS, sampled=[call_ids, [encoder.eos_id]])
    assert encoded.ids[-1] == encoder.eos_id and encoded.mask[-1] == 1
    assert sum(encoded.mask) == len(call_ids) + 1
    # Without the sampled ids there is no text to train on: still the clear error.
    with pytest.raises(TranscriptError, match="did not close"):
        encoder.encode(messages, TOOLS)


def test_a_template_that_rewrites_history_is_rejected(tokenizer):
    class Rewriting:
        eos_token = tokenizer.eos_token

        def convert_tokens_to_ids(self, token):
            return tokenizer.convert_tokens_to_ids(token)

        def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, tokenize=False):
            # Renders only the last two messages: earlier text disappears as the chat grows.
            body = "".join(f"<{m['role']}>{m['content']}{self.eos_token}" for m in messages[-2:])
            return body + ("<assistant>" if add_generation_prompt else "")

        def __call__(self, text, add_special_tokens=False):
            return tokenizer(text, add_special_tokens=add_special_tokens)

    with pytest.raises(TranscriptError, match="prefix-consistent|does not render"):
        TranscriptEncoder(Rewriting()).encode(transcript(), TOOLS)


def test_rollout_policy_records_what_it_sampled_and_cuts_at_the_end_of_a_call(tiny_llm):
    policy = RolloutPolicy(tiny_llm.lm, tiny_llm.tokenizer)
    eos = policy.encoder.eos_id
    call = policy.encoder.text_ids(format_tool_call("get_member", {"id": "M-7"}))
    # generate() pads a finished row with the pad id (= eos here): that padding was not sampled.
    assert policy._cut(call + [eos, eos]) == (call, "stop")
    assert policy._cut([11, 12, eos, eos]) == ([11, 12, eos], "stop")
    assert policy._cut([11, 12, 13]) == ([11, 12, 13], "length")
    messages = transcript()[:2]
    policy.bind(messages, TOOLS)
    [reply] = policy.chat_batch([messages], max_tokens=6, temperature=1.0, seed=0)
    [sampled] = policy.sampled(messages)
    assert 1 <= len(sampled) <= 6 and reply.usage.completion_tokens == len(sampled)
    assert reply.usage.prompt_tokens == len(policy.encoder.encode(messages, TOOLS, generation_prompt=True).ids)
    with pytest.raises(Exception, match="not bound"):
        policy.chat_batch([transcript()[:2]], max_tokens=2)
