"""The SFT warm start's optimisation speed against a plain PyTorch training step, same run.

    python benchmarks/bench_train.py [--steps 4] [--batch 4] [--min-len 700] [--max-len 1100]
                                     [--precision auto|no|bf16] [--json]

Both arms train SmolLM2-135M-Instruct (fp32 on the CPU, bf16 autocast where `use_bf16` says so;
`--precision` overrides it, to check that `auto` picks the faster one on this CPU)
on the same examples: `--batch` sequences per step whose lengths are spread between
`--min-len` and `--max-len` tokens (the warm start's golden trajectories are ~700-1,100 tokens,
mostly prompt), loss on the last 15% of each (the assistant turns).

- **plain**: a hand-written loop, the reference the issue sets: pad the batch to its longest
  sequence, forward, masked cross-entropy, backward, AdamW step;
- **sft**: the project's `rl.sft.run_sft` (TRL's SFTTrainer, with the project's settings: on a
  CPU one sequence per forward pass, `--batch` of them accumulated per optimiser step);
- **sft, TRL's CPU head**: the same with TRL's fused LM head as TRL runs it on a CPU, scoring
  every position, not only the labelled ones (`rl.trl_cpu`; `sft_trl_cpu_head_tokens_per_s`);
- **sft, padded batch**: the same with the whole batch in one padded forward pass, as plain runs
  it (`sft_padded_batch_tokens_per_s`; skipped where the project's setting is that already).

Tokens/s counts real (unpadded) tokens. Each arm runs one untimed warm-up step first. The
target: `sft` reaches at least 80% of `plain`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def make_examples(n: int, min_len: int, max_len: int, vocab: int, seed: int) -> list[dict[str, list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        ids = [rng.randrange(100, vocab) for _ in range(length)]
        cut = int(length * 0.85)
        out.append({"input_ids": ids, "assistant_masks": [0] * cut + [1] * (length - cut)})
    return out


def plain_steps(model, batches, lr: float, bf16: bool) -> float:
    """Seconds for all but the first batch: pad, forward, masked CE, backward, AdamW."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    start = 0.0
    for i, batch in enumerate(batches):
        if i == 1:
            start = time.perf_counter()
        longest = max(len(e["input_ids"]) for e in batch)
        ids = torch.zeros(len(batch), longest, dtype=torch.long)
        attn = torch.zeros_like(ids)
        labels = torch.full_like(ids, -100)
        for row, e in enumerate(batch):
            n = len(e["input_ids"])
            ids[row, :n] = torch.tensor(e["input_ids"])
            attn[row, :n] = 1
            mask = torch.tensor(e["assistant_masks"], dtype=torch.bool)
            labels[row, :n] = torch.where(mask, ids[row, :n], torch.tensor(-100))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def main() -> int:
    from toolorchestra.rl.config import MixedPrecision

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per arm (after one warm-up)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--min-len", type=int, default=700)
    parser.add_argument("--max-len", type=int, default=1100)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--precision", choices=get_args(MixedPrecision), default="auto",
                        help="train.mixed_precision (auto: the train stage's choice for this CPU)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.smollm2 import ensure_converted
    from toolorchestra.rl.config import SFTSettings, TrainConfig
    from toolorchestra.rl.sft import run_sft, sft_trainer
    from toolorchestra.rl.train import use_bf16

    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(__file__).resolve().parents[1]
    model_dir = args.model or ensure_converted(Settings(workspace=root).models_cache)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    bf16 = use_bf16(TrainConfig(mixed_precision=args.precision), "cpu")
    n = (args.steps + 1) * args.batch
    examples = make_examples(n, args.min_len, args.max_len, len(tokenizer), seed=0)
    batches = [examples[i:i + args.batch] for i in range(0, n, args.batch)]
    timed_tokens = sum(len(e["input_ids"]) for b in batches[1:] for e in b)

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    plain_s = plain_steps(model, batches, 1e-4, bf16)

    # The project's path; its step times come from the trainer's own callback.
    from transformers import TrainerCallback

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.begin = 0.0

        def on_step_begin(self, *a, **k):
            self.begin = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.begin)

    import trl.trainer.utils as trl_utils

    # TRL's own switch: on a CPU its fused head scores every position
    trl_head_switch = getattr(trl_utils._use_triton, "__wrapped__", trl_utils._use_triton)

    def sft_seconds(micro: int | None, *, trl_cpu_head: bool = False) -> float:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        timer = StepTimes()
        # Random batches, as the plain arm's: length-grouped ones would pad less than plain's and the
        # ratio would credit the sampler, not the step (the grouping's saving is counted in
        # tests/toolorchestra/rl/test_sft.py)
        settings = SFTSettings(steps=args.steps + 1, batch_size=args.batch, max_length=args.max_len + 8,
                               micro_batch_size=micro, group_by_length=False)
        with tempfile.TemporaryDirectory(prefix="bench-train-") as scratch:
            # no shuffling of order matters here: every batch has the same length spread on average
            trainer = sft_trainer(model, tokenizer, examples, settings, Path(scratch), bf16=bf16, callbacks=[timer])
            project_switch = trl_utils._use_triton
            if trl_cpu_head:  # the head as TRL runs it on a CPU: every position scored
                trl_utils._use_triton = trl_head_switch
            try:
                run_sft(trainer)
            finally:
                trl_utils._use_triton = project_switch
        return sum(timer.times[1:])

    # the train stage's setting (on a CPU one sequence per forward pass, accumulated), then the
    # whole batch as one padded pass, as the plain arm runs it
    micro = SFTSettings(batch_size=args.batch).micro_batch(use_cpu=True)
    sft_s = sft_seconds(None)
    padded_s = sft_seconds(args.batch) if micro != args.batch else sft_s
    full_head_s = sft_seconds(None, trl_cpu_head=True)

    figures = {
        "model": model_dir.name, "precision": "bf16-autocast" if bf16 else "fp32", "threads": torch.get_num_threads(),
        "batch": args.batch, "timed_steps": args.steps, "timed_tokens": timed_tokens,
        "plain_tokens_per_s": round(timed_tokens / plain_s, 1),
        "sft_tokens_per_s": round(timed_tokens / sft_s, 1), "sft_micro_batch": micro,
        "sft_padded_batch_tokens_per_s": round(timed_tokens / padded_s, 1),
        "sft_trl_cpu_head_tokens_per_s": round(timed_tokens / full_head_s, 1),
    }
    figures["sft_vs_plain"] = round(figures["sft_tokens_per_s"] / figures["plain_tokens_per_s"], 3)
    print(f"{figures['model']}, {figures['precision']}, {figures['threads']} threads, {args.batch} x "
          f"{args.min_len}-{args.max_len} tokens, {args.steps} timed steps ({timed_tokens} tokens)")
    print(f"plain PyTorch step: {figures['plain_tokens_per_s']:.0f} tokens/s")
    print(f"run_sft (TRL):      {figures['sft_tokens_per_s']:.0f} tokens/s "
          f"= {figures['sft_vs_plain']:.0%} of plain (target >= 80%), {micro} sequence(s) per forward pass")
    print(f"run_sft, one padded pass per batch: {figures['sft_padded_batch_tokens_per_s']:.0f} tokens/s")
    print(f"run_sft with TRL's CPU head (every position scored, as before rl.trl_cpu): "
          f"{figures['sft_trl_cpu_head_tokens_per_s']:.0f} tokens/s "
          f"(compact x{figures['sft_tokens_per_s'] / figures['sft_trl_cpu_head_tokens_per_s']:.2f})")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
