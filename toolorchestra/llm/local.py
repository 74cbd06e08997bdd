"""A local transformers causal LM as a chat backend, with batched generation.

The default model is SmolLM2-135M-Instruct (see `smollm2.py`); any transformers folder with a
chat template works. Runs on CUDA in bf16 when available, otherwise on the CPU in float32.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.base import BatchLLM, Completion, LLMError, Message, Usage, cut_at_stop, tools_by_row
from toolorchestra.llm.hermes import CLOSE


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(None, f"device {device!r} requested but CUDA is not available", key="device")
    return device


class StopAfterText:
    """Stop a row once its newly generated text contains `text` (e.g. `</tool_call>`), or any of
    several texts.

    transformers' own `stop_strings` rebuilds a vocabulary-wide table on every generate() call
    (about 15 s for SmolLM2 on two cores), so this decodes only each row's last few tokens, once
    per step for all texts; the window is at least the longest text (a token is one character or
    more, so a text always fits).
    """

    def __init__(self, tokenizer: Any, text: str | tuple[str, ...], prompt_len: int, window: int = 8) -> None:
        self.texts = (text,) if isinstance(text, str) else tuple(text)
        self.tokenizer, self.prompt_len = tokenizer, prompt_len
        self.window = max([window, *(len(t) for t in self.texts)])

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        tails = input_ids[:, max(self.prompt_len, input_ids.shape[1] - self.window):]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.texts) for t in texts], device=input_ids.device)


class LocalLLM(BatchLLM):
    """Chat over a transformers model folder. One generate() at a time per instance."""

    def __init__(self, model_dir: str | Path, *, name: str | None = None, device: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").exists():
            raise ConfigError(model_dir, "not a transformers model folder (no config.json)")
        self.model = name or model_dir.name
        self.device = resolve_device(device)
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self.device).eval()
        self._lock = threading.Lock()

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, name: str = "in-memory") -> LocalLLM:
        """Wrap an already loaded model (tests, and a policy being trained)."""
        self = cls.__new__(cls)
        self.model = name
        self.device = str(next(model.parameters()).device)
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.lm = model.eval()
        self._lock = threading.Lock()
        return self

    def render(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt text the model sees, ending with the assistant header."""
        return self.tokenizer.apply_chat_template(
            messages, tools=tools or None, add_generation_prompt=True, tokenize=False
        )

    def count_prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """Exact: the rendered chat template's tokens."""
        return len(self.tokenizer(self.render(messages, tools), add_special_tokens=False)["input_ids"])

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        import torch
        from transformers import StoppingCriteriaList

        if not batch:
            return []
        row_tools = tools_by_row(batch, tools, tools_per_row)
        prompts = [self.render(m, t) for m, t in zip(batch, row_tools, strict=True)]
        any_tools = any(row_tools)
        extra = tuple(s for s in stop or () if s)
        stop_texts = ((CLOSE,) if any_tools else ()) + extra
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        stop_ids = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id} - {None}
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
        started = time.perf_counter()
        try:
            with self._lock, torch.inference_mode():
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.lm.generate(
                    **enc,
                    max_new_tokens=max_tokens,
                    eos_token_id=sorted(stop_ids),
                    pad_token_id=self.tokenizer.pad_token_id,
                    # One call per turn: stop right after a complete tool-call block (or a stop string).
                    stopping_criteria=StoppingCriteriaList(
                        [StopAfterText(self.tokenizer, stop_texts, enc["input_ids"].shape[1])] if stop_texts else []
                    ),
                    **sampling,
                )
        except RuntimeError as exc:  # e.g. CUDA OOM: report, do not crash the caller's loop
            raise LLMError(f"local generation with {self.model} failed: {exc}") from exc
        latency = time.perf_counter() - started
        prompt_len = enc["input_ids"].shape[1]
        completions = []
        for row, mask in zip(out, enc["attention_mask"], strict=True):
            new = row[prompt_len:].tolist()
            finish = "length"
            for i, tok in enumerate(new):
                if tok in stop_ids:
                    new, finish = new[: i + 1], "stop"
                    break
            text, stopped = cut_at_stop(self.tokenizer.decode(new, skip_special_tokens=True), extra)
            if finish == "length" and (stopped or CLOSE in text):
                finish = "stop"
            completions.append(
                Completion(
                    text=text.strip(),
                    usage=Usage(prompt_tokens=int(mask.sum()), completion_tokens=len(new)),
                    latency_s=latency,
                    model=self.model,
                    finish_reason=finish,
                )
            )
        return completions
