"""Agent-runtime benchmark: the loop's own overhead per turn, and SmolLM2 generation speed.

    python benchmarks/bench_agent.py [--turns 2000] [--new-tokens 64]

1. Overhead: a scripted policy that answers instantly and an instant tool, so everything measured
   is the runtime itself (parsing, schema validation, pricing, recording, transcript). Target:
   under 1 ms per turn.
2. Generation: the real SmolLM2-135M-Instruct on this machine's CPU (or GPU if present), new
   tokens per second at batch 1 and batch 8, with `generate` forced to produce exactly N tokens.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.llm.base import LLM, Completion, Usage
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.tools.base import Tool, ToolOutput
from toolorchestra.tools.catalog import Price
from toolorchestra.tools.toolbox import Toolbox


class InstantPolicy(LLM):
    model = "instant"

    def __init__(self) -> None:
        self.reply = Completion(text="thinking\n" + format_tool_call("echo", {"text": "hi", "n": 3}),
                                usage=Usage(prompt_tokens=500, completion_tokens=20))

    def chat(self, messages, **kwargs):
        return self.reply


class Echo(Tool):
    name, description = "echo", "echo text"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
                  "required": ["text"], "additionalProperties": False}

    def run(self, arguments):
        return ToolOutput(content=arguments["text"] * arguments.get("n", 1))


def bench_overhead(turns: int, repeats: int = 5) -> float:
    orch = Orchestrator(InstantPolicy(), Toolbox([Echo()], prices={"echo": Price(per_call=0.001)}),
                        policy_price=Price(input_per_mtok=0.2, output_per_mtok=0.2), max_turns=turns)
    per_turn = []
    for _ in range(repeats):
        started = time.perf_counter()
        traj = orch.run("benchmark task")
        elapsed = time.perf_counter() - started
        assert len(traj.turns) == turns and all(t.ok for t in traj.turns)
        per_turn.append(elapsed / turns)
    return statistics.median(per_turn)


def bench_generation(new_tokens: int) -> dict[int, float]:
    import torch

    from toolorchestra.core.settings import load_settings
    from toolorchestra.llm.config import LocalLLMConfig, build_llm

    llm = build_llm(LocalLLMConfig(), load_settings())
    prompt = llm.render([{"role": "user", "content": "Write a long story about a robot who learns to paint."}])
    rates = {}
    for batch in (1, 8):
        enc = llm.tokenizer([prompt] * batch, return_tensors="pt", add_special_tokens=False).to(llm.device)
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                      pad_token_id=llm.tokenizer.pad_token_id)
        with torch.inference_mode():
            llm.lm.generate(**enc, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
            started = time.perf_counter()
            out = llm.lm.generate(**enc, **kwargs)
            elapsed = time.perf_counter() - started
        produced = (out.shape[1] - enc["input_ids"].shape[1]) * batch
        rates[batch] = produced / elapsed
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--skip-generation", action="store_true")
    args = parser.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    overhead = bench_overhead(args.turns)
    verdict = "OK" if overhead < 1e-3 else "ABOVE TARGET"
    print(f"runtime overhead per turn: {overhead * 1e3:.3f} ms over {args.turns}-turn episodes "
          f"(target < 1 ms: {verdict})")
    if not args.skip_generation:
        import torch

        device = "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
        for batch, rate in bench_generation(args.new_tokens).items():
            print(f"SmolLM2-135M generation on {device}: batch {batch}: {rate:.1f} new tokens/s")


if __name__ == "__main__":
    main()
