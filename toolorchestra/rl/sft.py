"""SFT warm start on golden trajectories, with TRL's SFTTrainer.

SmolLM2-135M emits no parseable tool call unprompted, so GRPO on it would see only invalid
rollouts (no reward, no gradient). A supervised pass on the training tasks' golden trajectories
(`RolloutEnvironment.golden_conversation`: for tool use the golden actions as Hermes calls, their
real observations and a reply stating the values to communicate; for QA the call the category
needs, `code_interpreter` for a calculation and `local_search` for a lookup, and the answer read
off its result) teaches the format and the routing first.

Examples are encoded with the same `TranscriptEncoder` as GRPO rollouts, so the model learns the
exact token layout it will generate in; only assistant tokens carry loss (`assistant_masks`, which
SFTTrainer folds into the labels). Keep the step count small: a saturated policy makes every
rollout of a group identical and GRPO then has nothing to learn from.
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict, deque
from pathlib import Path
from typing import Any

from toolorchestra.episodes.environment import RolloutEnvironment
from toolorchestra.episodes.instance import Instance
from toolorchestra.rl.config import SFTSettings
from toolorchestra.rl.transcript import TranscriptEncoder

log = logging.getLogger(__name__)


def golden_examples(env: RolloutEnvironment, instances: list[Instance], tokenizer: Any,
                    settings: SFTSettings, seed: int = 0) -> list[dict[str, list[int]]]:
    """Tokenized golden trajectories (`input_ids`, `assistant_masks`), one per task that has one
    (tool-use tasks, QA calculations and lookups), in a seeded order."""
    encoder = TranscriptEncoder(tokenizer)
    seen: set[tuple[str, str | None, str]] = set()
    examples = []
    kept: Counter[str] = Counter()
    order = list(instances)
    random.Random(seed).shuffle(order)
    if settings.stratify:
        order = interleave_strata(order)
    for instance in order:
        key = (instance.kind, instance.domain, instance.task_id)
        if key in seen:
            continue
        seen.add(key)
        golden = env.golden_conversation(instance)
        if golden is None:
            continue
        encoded = encoder.encode(golden[0], golden[1])
        if len(encoded.ids) > settings.max_length:
            log.info("skipping golden trajectory of %s: %d tokens > sft.max_length", instance.id, len(encoded.ids))
            continue
        examples.append({"input_ids": encoded.ids, "assistant_masks": encoded.mask})
        kept[stratum(instance)] += 1
        if settings.max_examples is not None and len(examples) >= settings.max_examples:
            break
    # which way the warm start routes follows this mix (docs/design.md), so the log keeps it
    log.info("warm start: %d golden trajectories (%s)", len(examples),
             ", ".join(f"{name} {n}" for name, n in kept.most_common()) or "none")
    return examples


def stratum(instance: Instance) -> str:
    """The kind of golden trajectory: `tool_use`, or a QA item's category (arithmetic, lookup,
    count, aggregate)."""
    return str(instance.task.get("category") or instance.kind) if instance.kind == "qa" else instance.kind


def interleave_strata(order: list[Instance]) -> list[Instance]:
    """`order` dealt round-robin over its strata (each stratum keeping its own order), so the first
    `max_examples` hold every category as evenly as its candidates allow. A seeded shuffle alone
    follows the pool's mix: the demo of 2026-12-04 took ~14 counts and ~6 aggregates among 96
    examples (53 calculations, 31 lookups) and its policy sent every held-out count and aggregate to
    `local_search`, as lookups go."""
    queues: dict[str, deque[Instance]] = defaultdict(deque)
    for instance in order:
        queues[stratum(instance)].append(instance)
    dealt: list[Instance] = []
    while queues:
        for name in list(queues):
            dealt.append(queues[name].popleft())
            if not queues[name]:
                del queues[name]
    return dealt


def sft_trainer(
    model: Any,
    tokenizer: Any,
    examples: list[dict[str, list[int]]],
    settings: SFTSettings,
    output_dir: Path,
    *,
    seed: int = 0,
    use_cpu: bool = True,
    bf16: bool | None = None,
    callbacks: list[Any] | None = None,
) -> Any:
    """TRL's SFTTrainer for `examples`, not yet trained."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    from toolorchestra.rl.trl_cpu import compact_fused_head_on_cpu

    if not examples:
        raise ValueError("no golden trajectories to train on (no tool-use instance replayed correctly)")
    micro = settings.micro_batch(use_cpu)
    args = SFTConfig(
        output_dir=str(output_dir),
        max_steps=settings.steps,
        # On a CPU one sequence per forward pass, batch_size of them accumulated per optimiser step
        # (the Trainer normalises the loss over the step's tokens, so the update is the batch's):
        # a padded batch pays for its padding and its attention takes the masked path, and on
        # SmolLM2-135M fp32, 2 cores, 4 x 1,000 tokens took 36 s one at a time against 61 s as one
        # batch with three rows padded by a quarter (45 s unpadded); the demo's warm start took
        # 939 s against 1,084 s with length-grouped padded batches of 4.
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=settings.batch_size // micro,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        max_length=settings.max_length,
        # A micro-batch is padded to its longest example, and golden trajectories run from ~460
        # tokens (a calculation) to ~1.5k (tool use): random batches of 4 padded the demo's 96
        # (73.6k tokens) to 93.4k, transformers' length-grouped sampler (random mega-batches, each
        # sorted) to 79.0k. Padding-free batches need flash attention, which a CPU lacks.
        train_sampling_strategy="group_by_length" if settings.group_by_length and micro > 1 else "random",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=use_cpu,
        bf16=(not use_cpu) if bf16 is None else bf16,  # on CPU: autocast over fp32 weights
        seed=seed,
        dataloader_num_workers=0,
        # TRL turns recomputation on by default; a 135M model's activations fit, and recomputing
        # them cost a third of the step (benchmarks/bench_train.py)
        gradient_checkpointing=False,
    )
    compact_fused_head_on_cpu()
    return SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(examples),
                      processing_class=tokenizer, callbacks=callbacks)


def run_sft(trainer: Any) -> dict[str, float]:
    """Train an `sft_trainer` (its model in place); returns the trainer's final metrics."""
    result = trainer.train()
    return {f"sft/{k}": float(v) for k, v in result.metrics.items() if isinstance(v, int | float)}
