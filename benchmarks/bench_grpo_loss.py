"""A GRPO step's optimisation phase: TRL's padded micro-batches against the project's row-wise loss.

    python benchmarks/bench_grpo_loss.py [--groups 8] [--generations 4] [--filtered 3]
                                         [--prompt 700 1200] [--completion 40 384]
                                         [--precision auto|no|bf16] [--check-fp32] [--json]

The generation batch is what a demo step hands TRL after its rollouts (`--groups` prompts x
`--generations` rollouts, `--filtered` groups without reward spread, whose rows the rollout
function masks out): random token ids for SmolLM2-135M-Instruct, prompt and completion lengths
spread over the given ranges, every prompt left-padded to the longest and every completion
right-padded to the longest, as TRL pads them; on each completion the sampled turns carry the
loss and the tool observations between them (a third of the tokens) do not. TRL shuffles the rows
and splits them into `--generations`-row micro-batches; each arm then runs every micro-batch's
loss and backward from the same weights:

- **trl**: `GRPOTrainer._compute_loss` as TRL runs it, every row of a micro-batch in one padded pass;
- **kept batch**: only the rows with a loss token, as one batch cut to the columns they use (what
  the train stage runs on a GPU);
- **rows**: the train stage's `OrchestraGRPOTrainer` on a CPU (`rl.trl_backend.loss_rows`): only
  the rows with a loss token, one at a time, each cut to its own columns.

The first and last arms are checked against each other: the summed loss, and the gradient (the norm of the
difference over the norm of the gradient, all parameters as one vector). In fp32 the two agree to
rounding (1.1e-5); under bf16 autocast each arm rounds its own shapes, so `--check-fp32` also runs
TRL's arm on an fp32 copy of the model without autocast and prints both arms' distance to that
exact gradient. Each arm runs one untimed micro-batch first. The
rollouts themselves are `benchmarks/bench_rollouts.py`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any, get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def generation_batch(args: argparse.Namespace, vocab: int, pad_id: int) -> dict[str, Any]:
    """The step's rollouts as TRL holds them before its shuffle (see the module docstring)."""
    import torch

    rng = random.Random(0)
    rows = args.groups * args.generations
    prompts = [rng.randint(*args.prompt) for _ in range(rows)]
    completions = [rng.randint(*args.completion) for _ in range(rows)]
    width_p, width_c = max(prompts), max(completions)
    prompt_ids = torch.full((rows, width_p), pad_id)
    prompt_mask = torch.zeros((rows, width_p), dtype=torch.long)
    completion_ids = torch.full((rows, width_c), pad_id)
    completion_mask = torch.zeros((rows, width_c), dtype=torch.long)
    tool_mask = torch.ones((rows, width_c), dtype=torch.long)  # TRL pads it with 1
    for r, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        prompt_ids[r, width_p - p:] = torch.tensor([rng.randrange(100, vocab) for _ in range(p)])
        prompt_mask[r, width_p - p:] = 1
        completion_ids[r, :c] = torch.tensor([rng.randrange(100, vocab) for _ in range(c)])
        completion_mask[r, :c] = 1
        observation = c // 3  # a tool observation in the middle of the completion: no loss
        tool_mask[r, c // 3: c // 3 + observation] = 0
    advantages = torch.tensor([rng.choice([-1.0, 1.0]) * rng.uniform(0.3, 1.5) for _ in range(rows)])
    filtered = rng.sample(range(args.groups), args.filtered)
    for g in filtered:  # what OrchestraRollouts returns for a group without reward spread
        tool_mask[g * args.generations:(g + 1) * args.generations] = 0
        advantages[g * args.generations:(g + 1) * args.generations] = 0.0
    num_items = (completion_mask * tool_mask).sum()
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "tool_mask": tool_mask, "advantages": advantages,
            "num_items_in_batch": num_items, "old_per_token_logps": None,
            "real_tokens": sum(prompts) + sum(completions), "filtered_groups": sorted(filtered)}


def main() -> int:
    from toolorchestra.rl.config import MixedPrecision

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--groups", type=int, default=8, help="prompts per step (train.grpo.prompts_per_step)")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per prompt (num_generations)")
    parser.add_argument("--filtered", type=int, default=3, help="groups without reward spread (the 2026-12-06 "
                        "demos: 3 and 4 of 8)")
    parser.add_argument("--prompt", type=int, nargs=2, default=(700, 1200), metavar=("MIN", "MAX"))
    parser.add_argument("--completion", type=int, nargs=2, default=(40, 384), metavar=("MIN", "MAX"),
                        help="completion tokens (train.grpo.max_completion_length: 384)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--precision", choices=get_args(MixedPrecision), default="auto",
                        help="train.mixed_precision (auto: the train stage's choice for this CPU)")
    parser.add_argument("--check-fp32", action="store_true", help="under bf16 autocast, also run TRL's arm in "
                        "fp32 and print each arm's distance to that exact gradient")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line last")
    args = parser.parse_args()
    if not 0 <= args.filtered <= args.groups:
        parser.error("--filtered must be between 0 and --groups")

    import datasets
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOTrainer
    from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.smollm2 import ensure_converted
    from toolorchestra.rl.config import GRPOSettings, TrainConfig
    from toolorchestra.rl.train import use_bf16
    from toolorchestra.rl.trl_backend import grpo_args, orchestra_grpo_trainer
    from toolorchestra.rl.trl_cpu import compact_fused_head_on_cpu

    if args.threads:
        torch.set_num_threads(args.threads)
    root = Path(__file__).resolve().parents[1]
    model_dir = args.model or ensure_converted(Settings(workspace=root).models_cache)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    bf16 = use_bf16(TrainConfig(mixed_precision=args.precision), "cpu")
    batch = generation_batch(args, len(tokenizer), tokenizer.pad_token_id or 0)
    real_tokens, filtered = batch.pop("real_tokens"), batch.pop("filtered_groups")
    torch.manual_seed(0)
    micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), args.groups)  # TRL's own split
    settings = GRPOSettings(num_generations=args.generations, prompts_per_step=args.groups)
    compact_fused_head_on_cpu()

    def reward(completions: list[Any], **_: Any) -> list[float]:  # never called: no rollout runs here
        return [0.0] * len(completions)

    with tempfile.TemporaryDirectory(prefix="bench-grpo-loss-") as scratch:
        config = grpo_args(settings, Path(scratch), use_cpu=True, seed=0, max_steps=1, bf16=bf16)
        trainer = orchestra_grpo_trainer()(model=str(model_dir), reward_funcs=[reward], args=config,
                                           train_dataset=datasets.Dataset.from_list([{"prompt": "x"}]),
                                           processing_class=tokenizer)
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = args.groups

    def arm(compute, *, net: Any = model) -> tuple[float, float, dict[str, Any]]:
        """Seconds for every micro-batch but the first (run untimed first), the summed loss and
        the accumulated gradients of `net`. TRL's loss opens the run's autocast around its forward."""
        net.zero_grad(set_to_none=True)
        total, seconds = 0.0, 0.0
        for i, micro in enumerate([micro_batches[0], *micro_batches]):
            began = time.perf_counter()
            loss = compute(net, micro)
            loss.backward()
            if i == 0:  # the warm-up: its gradients go
                net.zero_grad(set_to_none=True)
                continue
            seconds += time.perf_counter() - began
            total += float(loss.detach())
        grads = {n: p.grad.detach().clone() for n, p in net.named_parameters() if p.grad is not None}
        return seconds, total, grads

    trl_s, trl_loss, trl_grads = arm(lambda m, b: GRPOTrainer._compute_loss(trainer, m, b))
    kept_s, _, _ = arm(lambda m, b: trainer.loss_on_rows(m, b, one_per_row=False))  # what a GPU runs
    rows_s, rows_loss, rows_grads = arm(trainer._compute_loss)

    def distance(grads: dict[str, Any], reference: dict[str, Any]) -> float:
        """The gradients as one vector: the difference's norm over the reference's norm (a parameter
        without a gradient counts as zeros: with every group filtered the row-wise loss runs none)."""
        diff = sum(float((grads.get(n, torch.zeros_like(g)).float() - g.float()).pow(2).sum())
                   for n, g in reference.items()) ** 0.5
        return diff / max(sum(float(g.float().pow(2).sum()) for g in reference.values()) ** 0.5, 1e-30)

    rows_vs_trl = distance(rows_grads, trl_grads)
    exact: dict[str, float] = {}
    if args.check_fp32 and bf16:  # how far each bf16 arm is from the exact (fp32) gradient
        # The reference: a plain copy of the same weights through the same loss, with TRL's own
        # autocast (it opens one around the forward) turned off.
        from transformers import AutoModelForCausalLM
        from trl.trainer.utils import add_fused_lm_head

        plain = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        add_fused_lm_head(plain, temperature=trainer.temperature, outputs=("log_probs", "entropy"))  # as TRL does
        plain.train()
        autocast = trainer.accelerator.autocast
        trainer.accelerator.autocast = lambda *a, **k: contextlib.nullcontext()
        try:
            _, _, fp32_grads = arm(lambda m, b: GRPOTrainer._compute_loss(trainer, m, b), net=plain)
        finally:
            trainer.accelerator.autocast = autocast
        exact = {"grad_rel_diff_trl_vs_fp32": distance(trl_grads, fp32_grads),
                 "grad_rel_diff_rows_vs_fp32": distance(rows_grads, fp32_grads)}
    padded = sum(int(m["prompt_ids"].numel() + m["completion_ids"].numel()) for m in micro_batches)
    figures = {
        "model": model_dir.name, "precision": "bf16-autocast" if bf16 else "fp32", "threads": torch.get_num_threads(),
        "groups": args.groups, "generations": args.generations, "filtered_groups": len(filtered),
        "real_tokens": real_tokens, "padded_tokens": padded,
        "trl_s": round(trl_s, 2), "kept_batch_s": round(kept_s, 2), "rows_s": round(rows_s, 2),
        "speedup": round(trl_s / rows_s, 2),
        "loss_trl": trl_loss, "loss_rows": rows_loss,
        "loss_rel_diff": abs(rows_loss - trl_loss) / max(abs(trl_loss), 1e-12),
        "grad_rel_diff": rows_vs_trl, **exact, "same_parameters": set(trl_grads) == set(rows_grads),
    }
    print(f"{figures['model']}, {figures['precision']}, {figures['threads']} threads: {args.groups} groups x "
          f"{args.generations} rollouts, {len(filtered)} filtered, {real_tokens} tokens ({padded} padded)")
    print(f"TRL's padded micro-batches: {trl_s:.1f} s")
    print(f"the trained rows as one padded batch (a GPU's path): {kept_s:.1f} s  (x{trl_s / kept_s:.2f})")
    print(f"row-wise loss (the train stage on a CPU): {rows_s:.1f} s  (x{figures['speedup']:.2f})")
    print(f"summed loss {trl_loss:.6g} vs {rows_loss:.6g} (relative difference {figures['loss_rel_diff']:.1e}); "
          f"gradient difference {rows_vs_trl:.1e} of the gradient's norm")
    if exact:
        print(f"against the fp32 gradient: TRL's {exact['grad_rel_diff_trl_vs_fp32']:.1e}, "
              f"row-wise {exact['grad_rel_diff_rows_vs_fp32']:.1e} (bf16 autocast's own error)")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
