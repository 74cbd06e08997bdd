"""GRPO step anatomy on one CUDA GPU: rollout generation vs optimisation, tokens/s, MFU.

    python benchmarks/bench_train_gpu.py [--steps 3] [--groups 8] [--generations 8] [--peak-tflops 790] [--json]

Skips (exit 0) without CUDA. Runs the TRL backend's real code path (`build_grpo_trainer`: the
project's multi-turn environment, token-exact rollouts, the reward contract, TRL's GRPO loss and
optimiser) in bf16 on SmolLM2-135M-Instruct (or `--model FOLDER`) over tool-use tasks synthesized
from the embedded domains, `groups x generations` rollouts per step (64 by default, one batched
generation per turn). Per step it splits the wall time into

- **rollout**: the agent loop with HF `generate`, or vLLM colocated by TRL with
  `--rollout-engine vllm` (all turns, tool calls, scoring, encoding);
- **optimisation**: the rest of TRL's training step (log-probs, loss, backward, optimiser step);

and prints sampled tokens/s during rollout, trained tokens/s during optimisation, and MFU of the
optimisation (6 x parameters x tokens per forward+backward, against `--peak-tflops`, 790 for an
H200's dense bf16). Reference (plain PyTorch + transformers on one H200): forward+backward of
SmolLM2-135M at 16x2048 tokens reaches ~173k tokens/s (27% MFU), while HF `generate` reaches only
~2.4k new tokens/s at batch 64: generation is the bottleneck to attack.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# per step, from the trainer's logs: whether the rollouts had anything to learn from
LOGGED = ("accuracy", "turns_mean", "frac_reward_zero_std", "groups_filtered", "groups_refilled")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps timed (after one warm-up step)")
    parser.add_argument("--groups", type=int, default=8, help="instances (GRPO groups) per step")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per instance")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128, help="new tokens per turn")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="dense bf16 peak of the GPU")
    parser.add_argument("--rollout-engine", default="transformers", choices=["transformers", "vllm"],
                        help="HF generate, or TRL's colocated vLLM (needs the gpu extra)")
    parser.add_argument("--warm-start", type=int, default=0, metavar="STEPS",
                        help="SFT steps on the tasks' golden trajectories first (batch 8), so rollouts take the "
                             "turns and reward spread of a warm-started policy rather than the base model's")
    parser.add_argument("--profile", type=Path, metavar="FILE",
                        help="write cProfile's top functions of the warm-up step's rollout (left out of the figures) to FILE")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = parser.parse_args()

    if not cuda_or_skip("train_gpu", as_json=args.json):
        return 0
    import torch

    # the tasks and environment of bench_learning (this script's folder is on sys.path)
    from bench_learning import tool_use_setup
    from transformers import AutoTokenizer, TrainerCallback

    from toolorchestra.rl.config import GRPOSettings
    from toolorchestra.rl.trl_backend import build_grpo_trainer

    model_dir, instances, env, scratch = tool_use_setup("bench-train-gpu-", tasks=max(24, args.groups * 2),
                                                           max_turns=args.max_turns, max_tokens=args.max_tokens,
                                                           model=args.model)
    warm_s = None
    if args.warm_start:
        started = time.perf_counter()
        model_dir = warm(model_dir, env, instances, args.warm_start, scratch)
        warm_s = time.perf_counter() - started
        print(f"warm start: {args.warm_start} SFT steps in {warm_s:.1f} s")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    grpo = GRPOSettings(steps=args.steps + 1, num_generations=args.generations, prompts_per_step=args.groups,
                        max_completion_length=4096, save_steps=10_000, rollout_engine=args.rollout_engine)
    trainer = build_grpo_trainer(model_dir, tokenizer, env, instances, grpo, scratch / "grpo", use_cpu=False)
    rollouts = trainer.orchestra_rollouts
    timings: list[dict[str, float]] = []
    original = rollouts.__call__

    def timed(prompts, trainer_):
        profiler = None
        if args.profile and not timings:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = original(prompts, trainer_)
        torch.cuda.synchronize()
        if profiler is not None:
            profiler.disable()
            write_profile(profiler, args.profile)
        sampled = rollouts.last_sampled_tokens  # env_mask is zero on filtered groups' completions
        total = sum(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True))
        timings.append({"rollout_s": time.perf_counter() - start, "sampled": sampled, "tokens": total})
        return out

    trainer.rollout_func = timed

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.logs: list[dict[str, float]] = []
            self.begin = 0.0

        def on_step_begin(self, *a, **k):
            torch.cuda.synchronize()
            self.begin = time.perf_counter()

        def on_step_end(self, *a, **k):
            torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.begin)

        def on_log(self, args_, state, control, logs=None, **k):
            if logs and "orchestra/accuracy" in logs:
                self.logs.append({key: logs.get(f"orchestra/{key}") for key in LOGGED})

    steps = StepTimes()
    trainer.add_callback(steps)
    trainer.train()
    n_params = sum(p.numel() for p in trainer.model.parameters())
    rows = []
    logs = steps.logs + [{}] * (len(steps.times) - len(steps.logs))
    for step_s, t, logged in list(zip(steps.times, timings, logs, strict=False))[1:]:  # the first step warms up kernels
        optim_s = max(step_s - t["rollout_s"], 1e-9)
        flops = 6 * n_params * t["tokens"]
        rows.append({**logged, "step_s": step_s, "rollout_s": t["rollout_s"], "optim_s": optim_s,
                     "gen_tok_s": t["sampled"] / t["rollout_s"], "train_tok_s": t["tokens"] / optim_s,
                     "mfu": flops / optim_s / (args.peak_tflops * 1e12)})
    name = torch.cuda.get_device_name(0)
    print(f"{name}; model {model_dir.name} ({n_params / 1e6:.0f}M params, bf16); "
          f"{args.groups}x{args.generations} rollouts/step, <= {args.max_turns} turns x {args.max_tokens} tokens")
    print(f"{'step':>4} {'total s':>8} {'rollout s':>10} {'optim s':>8} {'gen tok/s':>10} {'train tok/s':>12} {'MFU':>6}")
    for i, r in enumerate(rows, 1):
        print(f"{i:>4} {r['step_s']:>8.2f} {r['rollout_s']:>10.2f} {r['optim_s']:>8.2f} {r['gen_tok_s']:>10.0f} "
              f"{r['train_tok_s']:>12.0f} {r['mfu']:>6.1%}  accuracy {r.get('accuracy')}, turns {r.get('turns_mean')}, "
              f"zero-spread groups {r.get('frac_reward_zero_std')}")
    if rows:
        mean = {k: statistics.fmean(r[k] for r in rows) for k in ("step_s", "rollout_s", "gen_tok_s", "train_tok_s", "mfu")}
        print(f"mean: rollout {mean['rollout_s'] / mean['step_s']:.0%} of the step; generation "
              f"{mean['gen_tok_s']:.0f} sampled tok/s; optimisation {mean['train_tok_s']:.0f} tok/s, MFU {mean['mfu']:.1%}")
    if args.json:
        print(json.dumps({"benchmark": "train_gpu", "device": name, "params": n_params, "groups": args.groups,
                          "generations": args.generations, "max_turns": args.max_turns,
                          "max_tokens": args.max_tokens, "rollout_engine": args.rollout_engine,
                          "warm_start_steps": args.warm_start, "warm_start_s": warm_s,
                          "torch": torch.__version__, "steps": rows}))
    return 0


def cuda_or_skip(benchmark: str, *, as_json: bool) -> bool:
    """True with a CUDA device; else says the benchmark is skipped (as JSON too with `--json`)."""
    import torch

    if torch.cuda.is_available():
        return True
    print("skipped: no CUDA device (this benchmark needs one GPU)")
    if as_json:
        print(json.dumps({"benchmark": benchmark, "skipped": "no CUDA device"}))
    return False


def write_profile(profiler, path: Path) -> None:
    """The top functions by cumulative and by own time, as text."""
    import io
    import pstats

    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    path.write_text(text.getvalue(), encoding="utf-8")


def warm(model_dir: Path, env, instances, steps: int, scratch: Path, *, use_cpu: bool = False) -> Path:
    """The flow's SFT warm start (`rl.train.warm_start`) on the instances' golden trajectories."""
    from toolorchestra.rl.config import TrainConfig
    from toolorchestra.rl.train import warm_start

    config = TrainConfig.model_validate({
        "base_model": str(model_dir), "device": "cpu" if use_cpu else "cuda", "seed": 0,
        "sft": {"steps": steps, "batch_size": 8, "learning_rate": 1e-4, "max_examples": 96},
    })
    folder, _ = warm_start(config, env, instances, model_dir, scratch / "warm", use_cpu=use_cpu, bf16=not use_cpu)
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
