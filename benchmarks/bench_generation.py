"""Generation speed per engine: prompt and new tokens per second, at batch 1 and batched.

    python benchmarks/bench_generation.py [--prompts 8] [--max-tokens 32] [--weights f16] [--model FOLDER]
                                          [--torch-threads N] [--json]

The same chats for both engines: the orchestrator's tool-laden system prompt (the embedded
catalog's tool schemas, as an episode renders them) and a different user question each. For the
transformers engine (`LocalLLM`) and the llama.cpp engine (`LlamaCppLLM`, the GGUF converted from the
same transformers folder at `--weights`; conversion happens before timing) it measures:

- **prefill**: prompt tokens/s of a 1-token reply per chat, one at a time, nothing reused
  (llama.cpp: context reset before each chat);
- **batch 1**: each chat alone, `--max-tokens` greedy new tokens: new tokens/s end to end (prefill
  included, as an agent turn pays it); llama.cpp with its context reset before each chat;
- **batched**: all chats in one `chat_batch` (transformers: one lockstep `generate`, left padding;
  llama.cpp: rows one after the other in one context, the shared system prompt reused through
  prefix matching): new tokens/s and the prompt tokens/s that throughput implies.

It prints the figures, the ratios llama.cpp / transformers, and whether the greedy replies are the
same text (per chat). With `--json` the last line is one JSON object: `tokens_per_s[engine][mode]`.
Other jobs on the machine skew absolute figures; the ratios are measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    "Which member borrowed the most books last month?", "What is 17 times 23?",
    "Find the due date of loan L-104.", "How many copies of 'Dune' are available?",
    "Who wrote the book with id B-12?", "Renew loan L-221 for member M-7.",
    "What is the capital of Australia?", "List the overdue loans of member M-3.",
]


def chats(n: int) -> tuple[list[list[dict]], list[dict]]:
    specs = tool_specs()
    system = ("You are an orchestrator. Route each question to the cheapest tool that can answer it; "
              "call one tool per turn and stop when you have the answer.")
    return [[{"role": "system", "content": system}, {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]
            for i in range(n)], specs


def tool_specs() -> list[dict]:
    """The OpenAI function schemas of the embedded catalog's code and expert tools, as episodes offer them."""
    from toolorchestra.core.settings import Settings
    from toolorchestra.tools.catalog import load_embedded_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    catalog = load_embedded_catalog()
    names = [t.name for t in catalog.tools if t.backend.type in ("code_interpreter", "expert")]
    toolbox = build_toolbox(catalog, Settings(), llm_for=lambda alias: None, only=names)
    return toolbox.specs()


def run_engine(llm, batch, specs, max_tokens: int, reset) -> dict:
    def timed(fn):
        started = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - started

    prefill_tokens, prefill_s = 0, 0.0
    for chat in batch:
        reset()
        out, seconds = timed(lambda c=chat: llm.chat(c, tools=specs, max_tokens=1))
        prefill_tokens, prefill_s = prefill_tokens + out.usage.prompt_tokens, prefill_s + seconds
    singles, single_s = [], 0.0
    for chat in batch:
        reset()
        out, seconds = timed(lambda c=chat: llm.chat(c, tools=specs, max_tokens=max_tokens))
        singles.append(out)
        single_s += seconds
    reset()
    batched, batched_s = timed(lambda: llm.chat_batch(batch, tools=specs, max_tokens=max_tokens))
    new_single = sum(c.usage.completion_tokens for c in singles)
    new_batched = sum(c.usage.completion_tokens for c in batched)
    return {
        "prefill_prompt_tokens_per_s": prefill_tokens / prefill_s,
        "batch1_new_tokens_per_s": new_single / single_s,
        f"batch{len(batch)}_new_tokens_per_s": new_batched / batched_s,
        f"batch{len(batch)}_prompt_tokens_per_s": sum(c.usage.prompt_tokens for c in batched) / batched_s,
        "prompt_tokens_mean": prefill_tokens / len(batch),
        "texts_batch1": [c.text for c in singles], "texts_batched": [c.text for c in batched],
    }


def main() -> None:
    from toolorchestra.llm.gguf_export import GGUFWeights

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="chats (the batched size)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--weights", choices=get_args(GGUFWeights), default="f16")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model alias or transformers folder")
    parser.add_argument("--torch-threads", type=int, default=None, help="transformers threads (default: torch's)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()

    import torch

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    from toolorchestra.core.settings import Settings, find_workspace
    from toolorchestra.llm.config import LlamaCppLLMConfig, LocalLLMConfig, build_llm
    from toolorchestra.llm.llamacpp import built_features

    settings = Settings(workspace=find_workspace(Path(__file__).resolve().parent))
    batch, specs = chats(args.prompts)
    engines = {"transformers": build_llm(LocalLLMConfig(model=args.model, device="cpu"), settings),
               "llamacpp": build_llm(LlamaCppLLMConfig(model=args.model, weights=args.weights), settings)}
    print(f"{args.model}: {args.prompts} chats, {len(specs)} tool schemas, max_tokens={args.max_tokens}, "
          f"GGUF {args.weights}; llama.cpp built with {'/'.join(built_features())}; "
          f"torch threads {torch.get_num_threads()}, llama.cpp threads "
          f"{engines['llamacpp'].n_threads} (n_parallel {engines['llamacpp'].n_parallel}), load average {os.getloadavg()[0]:.1f}")
    figures = {}
    for name, llm in engines.items():
        llm.chat(batch[0], tools=specs, max_tokens=2)  # warm-up (allocations, first-call costs)
        reset = llm.reset if name == "llamacpp" else (lambda: None)
        figures[name] = run_engine(llm, batch, specs, args.max_tokens, reset)
        shown = {k: round(v, 1) for k, v in figures[name].items() if not k.startswith("texts")}
        print(f"{name:>12}: {shown}", flush=True)
    old, new = figures["transformers"], figures["llamacpp"]
    ratios = {k: new[k] / old[k] for k in old if k.endswith("_per_s")}
    same1 = [a == b for a, b in zip(old["texts_batch1"], new["texts_batch1"], strict=True)]
    same_b = [a == b for a, b in zip(old["texts_batched"], new["texts_batched"], strict=True)]
    print("llama.cpp / transformers: " + ", ".join(f"{k} x{v:.2f}" for k, v in ratios.items()))
    print(f"greedy replies identical: batch 1 {sum(same1)}/{len(same1)}, batched {sum(same_b)}/{len(same_b)}")
    for i, (a, b) in enumerate(zip(old["texts_batch1"], new["texts_batch1"], strict=True)):
        if a != b:
            print(f"  chat {i}: transformers {a[:80]!r} | llama.cpp {b[:80]!r}")
    if args.json:
        print(json.dumps({
            "benchmark": "generation", "model": args.model, "weights": args.weights, "prompts": args.prompts,
            "max_tokens": args.max_tokens, "torch_threads": torch.get_num_threads(),
            "llamacpp_kernels": built_features(),
            "tokens_per_s": {name: {k: v for k, v in f.items() if k.endswith("_per_s")} for name, f in figures.items()},
            "ratio_llamacpp_over_transformers": ratios,
            "greedy_identical_batch1": sum(same1), "greedy_identical_batched": sum(same_b), "chats": len(same1),
        }))


if __name__ == "__main__":
    main()
