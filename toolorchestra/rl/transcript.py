"""Token-exact multi-turn transcripts: one encoding for rollouts, GRPO and SFT.

`TranscriptEncoder.encode(messages, tools)` turns a chat transcript into token ids plus a mask that
is 1 exactly on the tokens the policy produces (assistant turns and their end-of-turn token) and 0
on everything else (system and user text, tool schemas, `<tool_response>` observations, the chat
template's headers). It renders through the tokenizer's own chat template, piece by piece:

    render(messages[:i], generation prompt)  ->  the context the policy saw before turn i (mask 0)
    assistant turn i                         ->  the sampled ids when known, else its text (mask 1)

so the context of turn k during a rollout is, token for token, the prefix of the sequence GRPO
later scores, and SFT on golden trajectories trains the same layout. Tool observations therefore
never carry gradient (TRL's `env_mask`, verl's `response_mask`).

`RolloutPolicy` is the `LLM` the agent loop drives during training: it generates from those exact
contexts with the model being trained, samples, and records each turn's sampled ids, so the
completion GRPO trains on is what was sampled, not a re-tokenisation of decoded text.

The template must be prefix-consistent (rendering more messages only appends text), which holds
for ChatML templates such as SmolLM2's; a template that rewrites earlier turns (e.g. one that strips
past reasoning) is rejected with a `TranscriptError`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.core.errors import OrchestraError
from toolorchestra.llm.base import BatchLLM, Completion, LLMError, Message, Usage, tools_by_row
from toolorchestra.llm.hermes import CLOSE


class TranscriptError(OrchestraError):
    """A transcript cannot be encoded token-exactly with this tokenizer's chat template."""


@dataclass
class Encoded:
    """Token ids of a transcript, the trainable mask, and where the first generation starts."""

    ids: list[int]
    mask: list[int]
    prompt_len: int
    """Tokens before the first assistant turn: the initial prompt (system, tools, user)."""

    @property
    def prompt_ids(self) -> list[int]:
        return self.ids[: self.prompt_len]

    @property
    def completion_ids(self) -> list[int]:
        return self.ids[self.prompt_len:]

    @property
    def completion_mask(self) -> list[int]:
        return self.mask[self.prompt_len:]


class TranscriptEncoder:
    """Encode chat transcripts with a tokenizer's chat template (see the module docstring)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.eos_text: str = tokenizer.eos_token
        self.eos_id: int = tokenizer.convert_tokens_to_ids(self.eos_text)
        if self.eos_text is None or self.eos_id is None:
            raise TranscriptError("the tokenizer has no eos token; set it to the end-of-turn token")

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=generation_prompt, tokenize=False
        )

    def text_ids(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None = None,
        *,
        sampled: list[list[int]] | None = None,
        generation_prompt: bool = False,
        context_turns: int = 0,
    ) -> Encoded:
        """Ids and mask of `messages`.

        Args:
            sampled: the ids the policy sampled for each assistant turn, in order; a turn without
                an entry is encoded from its text. A sampled turn that did not end with the eos
                token (stopped after `</tool_call>`, or cut by length) gets the template's eos
                appended with mask 0: the policy did not produce it.
            generation_prompt: end with the header of a new assistant turn (a rollout context);
                otherwise the sequence ends right after the last assistant turn (a training one).
            context_turns: the first this many assistant turns are context, not targets (mask 0):
                a warm start's failed call that the example recovers from.
        """
        ids: list[int] = []
        mask: list[int] = []
        covered = ""  # rendered text already turned into ids
        pending = ""  # template text waiting to be tokenized in one piece (mask 0)
        prompt_len: int | None = None
        turn = 0
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            before = self.render(messages[:i], tools, True)
            if not before.startswith(covered):
                raise TranscriptError(
                    "the chat template is not prefix-consistent (rendering more messages changed "
                    f"earlier text at message {i}); token-exact multi-turn training needs one that only appends"
                )
            ids_piece = self.text_ids(pending + before[len(covered):])
            ids.extend(ids_piece)
            mask.extend([0] * len(ids_piece))
            if prompt_len is None:
                prompt_len = len(ids)
            after = self.render(messages[: i + 1], tools, False)
            end = after.rfind(self.eos_text)
            turn_ids = sampled[turn] if sampled is not None and turn < len(sampled) else None
            # An empty sampled reply (the policy ended its turn at once) renders without the
            # generation prompt's newline, so its end tag sits before `before` ends; its ids are
            # the sampled ones all the same, and only the text after the tag is needed.
            if end < len(before) and (turn_ids is None or end < 0):
                raise TranscriptError(
                    f"the chat template did not close assistant message {i} with {self.eos_text!r}"
                )
            target = int(turn >= context_turns)
            if turn_ids is not None:
                ids.extend(turn_ids)
                mask.extend([target] * len(turn_ids))
                if not turn_ids or turn_ids[-1] != self.eos_id:
                    ids.append(self.eos_id)
                    mask.append(0)
            else:
                if not after.startswith(before):
                    raise TranscriptError(f"assistant message {i} does not render after its generation prompt")
                body = self.text_ids(after[len(before):end])
                ids.extend(body + [self.eos_id])
                mask.extend([target] * (len(body) + 1))
            pending = after[end + len(self.eos_text):]
            covered = after
            turn += 1
        if generation_prompt or prompt_len is None:
            final = self.render(messages, tools, True)
            if not final.startswith(covered):
                raise TranscriptError("the chat template is not prefix-consistent at the final generation prompt")
            tail = self.text_ids(pending + final[len(covered):])
            ids.extend(tail)
            mask.extend([0] * len(tail))
            if prompt_len is None:
                prompt_len = len(ids)
        return Encoded(ids=ids, mask=mask, prompt_len=prompt_len)


@dataclass
class _Binding:
    tools: list[dict[str, Any]] | None
    sampled: list[list[int]] = field(default_factory=list)


class RolloutPolicy(BatchLLM):
    """The model being trained, as the agent loop's policy, generating from token-exact contexts.

    Bind each episode's transcript (the loop's `messages` list), optionally with its tool specs,
    before the loop runs; every `chat_batch` row is matched to its binding by identity, and the
    ids sampled for it are appended to the binding. A binding without specs takes the row's
    `tools` / `tools_per_row` on first use. Sampling uses `temperature` (> 0) unless a call asks
    for greedy decoding (`temperature=0`).
    """

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "policy", top_p: float = 1.0) -> None:
        self.lm, self.tokenizer, self.model, self.top_p = model, tokenizer, name, top_p
        self.encoder = TranscriptEncoder(tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.encoder.eos_id
        self._bindings: dict[int, tuple[list[Message], _Binding]] = {}
        self._lock = threading.Lock()

    def bind(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> None:
        # The list itself is kept so its id cannot be reused while the binding lives.
        self._bindings[id(messages)] = (messages, _Binding(tools=tools))

    def sampled(self, messages: list[Message]) -> list[list[int]]:
        return self._binding(messages).sampled

    def clear(self) -> None:
        self._bindings.clear()

    def _binding(self, messages: list[Message]) -> _Binding:
        entry = self._bindings.get(id(messages))
        if entry is None or entry[0] is not messages:
            raise LLMError("RolloutPolicy got a transcript that was not bound; call bind(messages, tools) first")
        return entry[1]

    def context(self, messages: list[Message]) -> list[int]:
        binding = self._binding(messages)
        return self.encoder.encode(messages, binding.tools, sampled=binding.sampled, generation_prompt=True).ids

    def row_contexts(self, batch: list[list[Message]], tools: Any, tools_per_row: Any,
                     stop: list[str] | None = None) -> list[list[int]]:
        """Each row's token-exact context, its binding taking the row's tool specs on first use.
        A rollout's reply is exactly the tokens it sampled, so there is no `stop` to cut it at."""
        if stop:
            raise ValueError("a training rollout cannot take stop strings: its reply is what it sampled")
        for messages, specs in zip(batch, tools_by_row(batch, tools, tools_per_row), strict=True):
            binding = self._binding(messages)
            if binding.tools is None and specs:
                binding.tools = specs
        return [self.context(m) for m in batch]

    def record(self, messages: list[Message], context: list[int], new: list[int], finish: str,
               latency_s: float) -> Completion:
        """Keep the ids sampled for `messages`' turn and return the loop's view of the reply."""
        self._binding(messages).sampled.append(new)
        return Completion(text=self.tokenizer.decode(new, skip_special_tokens=True).strip(), model=self.model,
                          finish_reason=finish, usage=Usage(prompt_tokens=len(context), completion_tokens=len(new)),
                          latency_s=latency_s)

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        import torch
        from transformers import StoppingCriteriaList

        from toolorchestra.llm.local import StopAfterText

        if not batch:
            return []
        contexts = self.row_contexts(batch, tools, tools_per_row, stop)
        width = max(len(c) for c in contexts)
        device = next(self.lm.parameters()).device
        input_ids = torch.full((len(contexts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, ctx in enumerate(contexts):  # left padding, as generation needs
            input_ids[row, width - len(ctx):] = torch.tensor(ctx, dtype=torch.long)
            attention[row, width - len(ctx):] = 1
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_p": self.top_p, "top_k": 0}
        was_training = self.lm.training
        started = time.perf_counter()
        try:
            with self._lock, torch.no_grad():
                self.lm.eval()
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.lm.generate(
                    input_ids=input_ids.to(device), attention_mask=attention.to(device),
                    max_new_tokens=max_tokens, eos_token_id=[self.encoder.eos_id], pad_token_id=self.pad_id,
                    stopping_criteria=StoppingCriteriaList([StopAfterText(self.tokenizer, CLOSE, width)]),
                    use_cache=True, **sampling,
                )
        except RuntimeError as exc:
            raise LLMError(f"rollout generation failed: {exc}") from exc
        finally:
            if was_training:
                self.lm.train()
        elapsed = time.perf_counter() - started
        rows = [self._cut(out[row, width:].tolist()) for row in range(len(contexts))]
        longest = max((len(r[0]) for r in rows), default=1) or 1
        # One batched generate serves every row: a row is charged the share of the wall time its
        # own tokens took, so a shorter reply is a faster one.
        return [self.record(messages, ctx, new, finish, elapsed * len(new) / longest)
                for messages, ctx, (new, finish) in zip(batch, contexts, rows, strict=True)]

    def _cut(self, new: list[int]) -> tuple[list[int], str]:
        """The ids this row actually sampled: through its eos, or through the `</tool_call>` that
        stopped it (generate pads finished rows with the pad id, which is also the eos id here)."""
        eos = self.encoder.eos_id
        stop = new.index(eos) if eos in new else len(new)
        if CLOSE in self.tokenizer.decode(new[:stop], skip_special_tokens=True):
            for length in range(1, stop + 1):
                if CLOSE in self.tokenizer.decode(new[:length], skip_special_tokens=True):
                    return new[:length], "stop"
        if stop < len(new):
            return new[: stop + 1], "stop"
        return new, "length"
