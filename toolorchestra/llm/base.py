"""One interface for every LLM backend, and what a call reports.

`LLM.chat(messages, tools=...)` takes OpenAI-style chat messages (dicts with `role`, `content`,
and for assistant turns optionally `tool_calls`) and OpenAI function-tool schemas, and returns a
`Completion` with the text, any structured tool calls the server parsed, token counts and wall
latency. Prices are not here: callers price `usage` from the tool catalog.

`stop` (as OpenAI's): generation ends at the first of these strings and the reply leaves it out;
`usage` counts the tokens generated. The program expert uses it to end its reply at the code
block's closing fence instead of ~60 tokens of prose later. Training rollout policies refuse it
(a rollout's reply must be the tokens it sampled); scripted evaluation policies, which generate
no text, ignore it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.core.errors import OrchestraError

Message = dict[str, Any]
"""An OpenAI-style chat message."""


def cut_at_stop(text: str, stop: list[str] | None) -> tuple[str, bool]:
    r"""`text` before the earliest of the `stop` strings, and whether one occurred.

    >>> cut_at_stop("print(1)\n```\n\nThis prints 1.", ["```\n\n"])
    ('print(1)\n', True)
    """
    at = min((i for i in (text.find(s) for s in stop or () if s) if i >= 0), default=-1)
    return (text[:at], True) if at >= 0 else (text, False)


def tools_by_row(batch: list[Any], tools: list[dict[str, Any]] | None,
                 tools_per_row: list[list[dict[str, Any]] | None] | None) -> list[list[dict[str, Any]] | None]:
    """Each chat's tool schemas for `LLM.chat_batch`: `tools_per_row`, else `tools` for every chat."""
    if tools_per_row is None:
        return [tools] * len(batch)
    if len(tools_per_row) != len(batch):
        raise ValueError("tools_per_row needs one entry per chat")
    return list(tools_per_row)


class LLMError(OrchestraError):
    """An LLM call failed after its retries (endpoint down, timeout, bad response)."""


class Usage(BaseModel):
    """Token counts of one or more LLM calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    """Of `prompt_tokens`, those the engine read from its prefix cache instead of computing them
    (llama.cpp's live sequences, an OpenAI-compatible server's `prompt_tokens_details.cached_tokens`).
    Reported, not billed: how many hit the cache depends on what ran before, so pricing these would
    make an episode's cost depend on its neighbours (and a preference run that follows its neutral
    twin would look thriftier for free). The cached input price applies instead to the tokens a
    stated rule names (`toolorchestra.agent.trajectory.reused_prompt_tokens`)."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ToolCallRequest(BaseModel):
    """A tool call as a server parsed it (OpenAI `tool_calls`); `arguments` is the raw JSON text."""

    name: str
    arguments: str
    id: str | None = None


class Completion(BaseModel):
    text: str
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    """Structured calls when the backend parses them (OpenAI-compatible servers); otherwise empty
    and the caller parses Hermes `<tool_call>` blocks from `text`."""
    usage: Usage = Field(default_factory=Usage)
    latency_s: float = 0.0
    model: str = ""
    finish_reason: str | None = None


class LLM(ABC):
    """A chat model. Implementations: `local` (transformers) and `openai` (HTTP)."""

    model: str
    concurrent_episodes: bool = False
    """Whether an evaluation runs this policy's episodes each in its own thread rather than in lockstep
    batches (`EvalConfig.scheduling: auto`): true where concurrent calls overlap without slowing each
    other (a server that batches its requests, which lockstep would call one at a time; a router
    without a model). False for the local engines: transformers batches one `generate` call, and
    llama.cpp, though it merges concurrent calls, was no faster per episode on 2 cores (its decode is
    compute-bound; `benchmarks/bench_eval.py --compare scheduling`) while lockstep batches repeat
    exactly."""

    @abstractmethod
    def chat(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: list[str] | None = None,
    ) -> Completion:
        """One chat completion (`stop`: see the module docstring). Raises `LLMError` when the backend
        fails after retries."""

    def count_prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """How many prompt tokens `chat(messages, tools=tools)` would send (the agent loop's cost
        budget). Backends with a tokenizer count exactly (`LocalLLM`); this default estimates one
        token per 3 characters of the JSON, which errs high for plain messages but can miss what a
        server's chat template adds around tool schemas, so a remote policy's budget is approximate."""
        text = json.dumps(messages, ensure_ascii=False) + (json.dumps(tools, ensure_ascii=False) if tools else "")
        return -(-len(text) // 3)

    def chat_batch(
        self,
        batch: list[list[Message]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tools_per_row: list[list[dict[str, Any]] | None] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        stop: list[str] | None = None,
    ) -> list[Completion]:
        """Several independent chats; backends that can batch override this.

        `tools_per_row` gives each chat its own tool schemas (episodes with different tool sets);
        otherwise `tools` applies to all. With a `seed`, rows of the same chat sample differently
        (here row i uses `seed + i`) and a rerun repeats them.
        """
        return [
            self.chat(m, tools=specs, max_tokens=max_tokens, temperature=temperature,
                      seed=None if seed is None else seed + i, stop=stop)
            for i, (m, specs) in enumerate(zip(batch, tools_by_row(batch, tools, tools_per_row), strict=True))
        ]


class BatchLLM(LLM):
    """A backend whose native call is the batch (local generation): one chat is a batch of one."""

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None) -> Completion:
        return self.chat_batch([messages], tools=tools, max_tokens=max_tokens, temperature=temperature, seed=seed,
                               stop=stop)[0]

    @abstractmethod
    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        """See `LLM.chat_batch`."""
