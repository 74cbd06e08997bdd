"""A GGUF model through llama.cpp (`llama-cpp-python`) as a chat backend: fixed-weight work on the CPU.

Same contract as the transformers engine (`local.LocalLLM`), so an episode cannot tell them apart:
the prompt is rendered by the same tools-aware chat template and tokenized by the checkpoint's own
transformers tokenizer (identical token ids in both engines), replies are decoded by it, a turn
stops at `<|im_end|>`/eos or right after a complete `</tool_call>` (decoded over the last few new
tokens, as `StopAfterText` does), and `usage` counts the prompt's tokens and the new ones up to and
including the stop token.

Speed comes from never encoding a prefix twice: rows of a batch run in prompt order, so episodes
sharing a system prompt (tool schemas, prices, policy) follow each other and llama.cpp's in-context
prefix match keeps that part of the KV cache; a `PrefixCache` of saved KV states brings back each
episode's previous turn (prompt + reply) when other episodes ran in between. Rows are generated one
after the other in one context: on two cores the matrix-vector work of one sequence already uses
both (llama-cpp-python's high-level API has one sequence per context).

Threads: llama.cpp's workers spin-wait at every operation's barrier, so a thread more than the free
cores stalls them all; on the shared two-core machine 2 threads ran at 0.8 new tokens/s and 1 thread
at 19 (SmolLM2 f16, other jobs running). The default is 1 (llama-cpp-python's own default on two
cores); raise `n_threads` on an idle machine with more cores.
"""

from __future__ import annotations

import atexit
import threading
import time
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.base import BatchLLM, Completion, LLMError, Message, Usage, tools_by_row
from toolorchestra.llm.gguf_export import GGUFWeights
from toolorchestra.llm.hermes import CLOSE
from toolorchestra.llm.prefix_cache import PrefixCache

STOP_WINDOW = 8
"""New tokens decoded to look for `</tool_call>` (as `local.StopAfterText`)."""


class LlamaCppLLM(BatchLLM):
    """Chat over a GGUF file, with the transformers tokenizer (and chat template) `tokenizer`: a folder or a loaded one."""

    def __init__(self, gguf_file: str | Path, tokenizer: str | Path | Any, *, name: str | None = None,
                 n_ctx: int = 8192, n_batch: int = 512, n_threads: int = 1,
                 prefix_cache_mib: int = 1024) -> None:
        from llama_cpp import Llama
        from transformers import AutoTokenizer

        gguf_file = Path(gguf_file)
        if not gguf_file.is_file():
            raise ConfigError(gguf_file, "GGUF file not found")
        if isinstance(tokenizer, (str, Path)):
            self.model = name or Path(tokenizer).name
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        else:  # an already loaded tokenizer
            self.model, self.tokenizer = name or gguf_file.stem, tokenizer
        self.device = "cpu"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        try:
            self.llama = Llama(model_path=str(gguf_file), n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                               n_threads=n_threads, n_threads_batch=n_threads, logits_all=False, verbose=False)
        except (ValueError, RuntimeError) as exc:  # llama.cpp reports a bad file as "Failed to load model"
            raise ConfigError(gguf_file, f"llama.cpp cannot load this GGUF: {exc}") from None
        # Free the model before interpreter teardown: llama-cpp-python's finalizer otherwise runs
        # after its ctypes bindings are gone and prints a TypeError at exit.
        atexit.register(self.llama.close)
        self.n_ctx = n_ctx
        self.cache = PrefixCache(prefix_cache_mib << 20)
        self.stop_ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        self._lock = threading.Lock()
        self.prompt_tokens_encoded = 0
        """Prompt tokens actually decoded (the rest came from a cached prefix): for benchmarks."""

    @classmethod
    def from_local(cls, local: Any, cache_root: Path, *, weights: GGUFWeights = "f16", **kwargs: Any) -> LlamaCppLLM:
        """The model of a loaded `LocalLLM` (a checkpoint, a registered model) on llama.cpp, with its
        tokenizer; its GGUF is cached under `cache_root` by weights hash (a 135M model is saved in
        about a second to hash it; converting it the first time takes longer)."""
        import tempfile

        from toolorchestra.llm.gguf_export import ensure_gguf

        cache_root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_root) as tmp:
            local.lm.save_pretrained(tmp, safe_serialization=True)
            local.tokenizer.save_pretrained(tmp)
            gguf = ensure_gguf(Path(tmp), cache_root, weights=weights)
        return cls(gguf, local.tokenizer, name=local.model, **kwargs)

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text the model sees, ending with the assistant header (as `LocalLLM.render`)."""
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )

    def generate_ids(self, prompt: list[int], *, max_tokens: int, temperature: float, stop_at_close: bool,
                  seed: int | None) -> tuple[list[int], str]:
        """(new tokens up to and including the stop token, finish reason) for one prompt."""
        llm = self.llama
        if len(prompt) + max_tokens > self.n_ctx:
            raise LLMError(f"{self.model}: prompt of {len(prompt)} tokens + {max_tokens} new exceeds "
                           f"the context of {self.n_ctx} tokens (raise n_ctx)")
        shared = self.cache.restore_best(llm, prompt)
        # generate() keeps the matching prefix and re-decodes at least the last prompt token.
        self.prompt_tokens_encoded += len(prompt) - min(shared, len(prompt) - 1)
        sampling: dict[str, Any] = {"temp": 0.0}
        if temperature > 0:
            sampling = {"temp": temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
            if seed is not None:
                llm.set_seed(seed)
        new: list[int] = []
        finish = "length"
        for token in llm.generate(prompt, repeat_penalty=1.0, reset=True, **sampling):
            new.append(int(token))
            if token in self.stop_ids:
                finish = "stop"
                break
            if stop_at_close and CLOSE in self.tokenizer.decode(new[-STOP_WINDOW:], skip_special_tokens=True):
                finish = "stop"
                break
            if len(new) >= max_tokens:
                break
        self.cache.save(llm)
        return new, finish

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None) -> list[Completion]:
        if not batch:
            return []
        row_tools = tools_by_row(batch, tools, tools_per_row)
        prompts = [self.tokenizer(self.render(m, t), add_special_tokens=False)["input_ids"]
                   for m, t in zip(batch, row_tools, strict=True)]
        completions: list[Completion | None] = [None] * len(batch)
        # Prompt order puts rows that share a system prompt next to each other (prefix reuse).
        order = sorted(range(len(batch)), key=lambda i: prompts[i])
        with self._lock:
            for i in order:
                started = time.perf_counter()
                try:
                    new, finish = self.generate_ids(prompts[i], max_tokens=max_tokens, temperature=temperature,
                                                 stop_at_close=bool(row_tools[i]), seed=seed)
                except RuntimeError as exc:  # llama_decode failures: report, do not crash the caller's loop
                    raise LLMError(f"llama.cpp generation with {self.model} failed: {exc}") from exc
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                completions[i] = Completion(
                    text=text.strip(), usage=Usage(prompt_tokens=len(prompts[i]), completion_tokens=len(new)),
                    latency_s=time.perf_counter() - started, model=self.model, finish_reason=finish)
        return [c for c in completions if c is not None]
