"""A GRPO step's rollout phase on transformers (old) vs llama.cpp (new), same run, same episodes.

    python benchmarks/bench_rollouts.py [--model FOLDER] [--groups 4] [--generations 4] [--json]

Both arms run the train stage's rollout code (`RolloutEnvironment.run` driving a `RolloutPolicy`:
token-exact contexts, every turn of every rollout of the step in lockstep) over the same
`groups x generations` tool-use episodes synthesized from the embedded domains, with SmolLM2-135M-
Instruct (or `--model`, e.g. the demo's `models/warm_start`, which calls tools and so runs more
turns):

- **transformers**: `RolloutPolicy`, HF `generate` on the training model (torch's threads);
- **llama.cpp**: `LlamaCppRollouts`, the step's weights exported to GGUF (`--weights`, f16 by
  default) and loaded, then `LlamaCppRolloutPolicy`; the export is timed and included.

Printed: seconds, sampled tokens/s and episodes/s per arm, the export's share, and the speedup
of the whole phase. At `--temperature 0` both arms decode greedily and the sampled token ids of
every turn are compared (`turns_identical`); at the default 1.0 (GRPO's) they are different samples
of the same policy and the valid-call rates are printed side by side instead.
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


def run_arm(env, policy, instances, temperature: float) -> tuple[float, list, list[list[list[int]]]]:
    started = time.perf_counter()
    rollouts = env.run(policy, instances, temperature=temperature, seed=0 if temperature == 0 else None)
    seconds = time.perf_counter() - started
    sampled = [policy.sampled(r.trajectory.messages) for r in rollouts]
    policy.clear()
    return seconds, rollouts, sampled


def main() -> int:
    from toolorchestra.llm.gguf_export import GGUFWeights

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--groups", type=int, default=4, help="instances (GRPO groups) in the step")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per instance")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48, help="new tokens per turn")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--weights", default="f16", choices=get_args(GGUFWeights))
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = parser.parse_args()

    import torch
    from bench_learning import tool_use_setup  # this script's folder is on sys.path
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolorchestra.rl.llamacpp_rollouts import LlamaCppRollouts
    from toolorchestra.rl.transcript import RolloutPolicy

    model_dir, pool, env, scratch = tool_use_setup("bench-rollouts-", tasks=max(12, args.groups * 2),
                                                      max_turns=args.max_turns, max_tokens=args.max_tokens,
                                                      model=args.model)
    chosen = pool[: args.groups]
    instances = [i for i in chosen for _ in range(args.generations)]  # grouped, as TRL hands them over
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    old_s, old_rollouts, old_sampled = run_arm(env, RolloutPolicy(model, tokenizer), instances, args.temperature)
    factory = LlamaCppRollouts(model_dir, scratch / "engine", weights=args.weights, n_threads=args.threads)
    started = time.perf_counter()
    policy = factory(model, tokenizer)
    export_s = time.perf_counter() - started
    gen_s, new_rollouts, new_sampled = run_arm(env, policy, instances, args.temperature)
    new_s = export_s + gen_s
    factory.close()

    def tokens(sampled) -> int:
        return sum(len(t) for turns in sampled for t in turns)

    n = len(instances)
    figures = {
        "model": model_dir.name, "episodes": n, "groups": args.groups, "generations": args.generations,
        "temperature": args.temperature, "weights": args.weights, "llamacpp_threads": args.threads,
        "torch_threads": torch.get_num_threads(),
        "rollout_s_old": round(old_s, 2), "rollout_s_new": round(new_s, 2), "export_s": round(export_s, 2),
        "sampled_tokens_old": tokens(old_sampled), "sampled_tokens_new": tokens(new_sampled),
        "sampled_tokens_per_s_old": round(tokens(old_sampled) / old_s, 1),
        "sampled_tokens_per_s_new": round(tokens(new_sampled) / new_s, 1),
        "episodes_per_s_old": round(n / old_s, 3), "episodes_per_s_new": round(n / new_s, 3),
        "speedup": round(old_s / new_s, 2),
        "format_valid_old": sum(r.format_valid for r in old_rollouts) / n,
        "format_valid_new": sum(r.format_valid for r in new_rollouts) / n,
    }
    if args.temperature == 0:
        figures["turns_identical"] = sum(a == b for a, b in zip(old_sampled, new_sampled, strict=True))
    print(f"{figures['model']}: {args.groups} groups x {args.generations} rollouts, <= {args.max_turns} turns x "
          f"{args.max_tokens} tokens, temperature {args.temperature}")
    print(f"transformers: {old_s:.1f} s, {figures['sampled_tokens_per_s_old']:.0f} sampled tokens/s, "
          f"{figures['episodes_per_s_old']:.2f} episodes/s ({torch.get_num_threads()} torch threads)")
    print(f"llama.cpp:    {new_s:.1f} s (export + load {export_s:.1f} s), {figures['sampled_tokens_per_s_new']:.0f} "
          f"sampled tokens/s, {figures['episodes_per_s_new']:.2f} episodes/s ({args.weights}, {args.threads} thread(s))")
    print(f"speedup of the rollout phase: x{figures['speedup']:.2f}; format-valid "
          f"{figures['format_valid_old']:.2f} vs {figures['format_valid_new']:.2f}"
          + (f"; greedy episodes identical {figures['turns_identical']}/{n}" if args.temperature == 0 else ""))
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
