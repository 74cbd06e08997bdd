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

import ast
import logging
import random
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from toolorchestra.episodes.environment import RolloutEnvironment
from toolorchestra.episodes.instance import Instance
from toolorchestra.rl.config import SFTSettings
from toolorchestra.rl.transcript import TranscriptEncoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variant:
    """A training task dealt as another example than its whole golden trajectory; `kind` is its
    stratum."""

    instance: Instance
    kind: ClassVar[str]

    @property
    def id(self) -> str:
        return f"{self.instance.id}#{self.kind}"


class FirstCall(Variant):
    """A tool-use task whose first golden call alone is the example (`RolloutEnvironment.golden_first_call`)."""

    kind = "first_call"


class Recovery(Variant):
    """A QA item's golden program dealt after a broken try (`RolloutEnvironment.golden_recovery`)."""

    kind = "recovery"


Dealt = Instance | FirstCall | Recovery
"""What the warm start deals: a task's whole golden trajectory, a longer task's first call, or a
QA program retried after a failed one."""

HELPERS = {"find": 0, "count": 0, "total": 1, "average": 1, "maximum": 1, "minimum": 1}
"""The records helpers (`envs.records`) -> which positional argument names the table."""


def broken_program(program: str, rng: random.Random) -> str | None:
    """A wrong version of a golden program, as the 135M policy writes them in the evaluation's
    trajectories: the helper's table replaced by one of its field arguments (a `KeyError` that
    lists the tables), an argument left out (a `TypeError` naming it), or the closing bracket
    missing (a `SyntaxError`). A program without a records helper (a calculation) can only lose
    its bracket. None when it cannot be broken (it does not parse, or the
    break drawn does not apply to it)."""
    try:
        tree = ast.parse(program)
    except SyntaxError:
        return None
    call = next((node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id in HELPERS and len(node.args) >= 3), None)
    breaks = ["unclosed"] + (["table", "argument"] if call is not None else [])
    kind = rng.choice(breaks)
    if kind == "unclosed":
        stripped = program.rstrip()
        return stripped[:-1] if stripped.endswith(")") else None
    table = HELPERS[call.func.id]
    if kind == "table":
        field = call.args[table + 1]  # the field after the table: a name the question words
        if not isinstance(field, ast.Constant):
            return None
        call.args[table] = ast.Constant(field.value)
    else:
        del call.args[table + 1]  # count loses its field, an aggregate its ref_field
    return ast.unparse(tree)


def golden_examples(env: RolloutEnvironment, instances: list[Instance], tokenizer: Any,
                    settings: SFTSettings, seed: int = 0,
                    first_call_pool: list[Instance] | None = None) -> list[dict[str, list[int]]]:
    """Tokenized golden trajectories (`input_ids`, `assistant_masks`), one per task that has one
    (tool-use tasks, QA calculations and lookups), in a seeded order; with `settings.first_calls`,
    also up to that many first golden calls of `first_call_pool`'s tasks (longer tool-use tasks);
    with `settings.recoveries`, those categories' programs once more after a broken try."""
    encoder = TranscriptEncoder(tokenizer)
    order: list[Dealt] = list(one_per_task(instances, seed))
    if settings.first_calls:
        order += [FirstCall(i) for i in one_per_task(first_call_pool or [], seed)]
    if settings.recoveries:
        order += [Recovery(i) for i in one_per_task(instances, seed)
                  if i.kind == "qa" and i.task.get("category") in settings.recoveries]
    breaks = random.Random(seed)
    order = interleave_strata(order, settings.repeat) if settings.stratify else repeated(order, settings.repeat)
    encoded_for: dict[str, Any] = {}  # a repeated task is replayed once
    examples = []
    distinct: set[str] = set()
    kept: Counter[str] = Counter()
    for instance in order:
        if isinstance(instance, FirstCall) and kept[FirstCall.kind] >= settings.first_calls:
            continue  # enough of them (the pool is every longer task: some replay wrong or run long)
        if instance.id not in encoded_for:
            context_turns = 0
            if isinstance(instance, FirstCall):
                golden = env.golden_first_call(instance.instance)
            elif isinstance(instance, Recovery):
                broken = broken_program(str(instance.instance.task.get("program")), breaks)
                golden = None if broken is None else env.golden_recovery(instance.instance, broken)
                context_turns = 1  # the broken call is what the policy recovers from, not a target
            else:
                golden = env.golden_conversation(instance)
            encoded_for[instance.id] = (None if golden is None
                                        else encoder.encode(golden[0], golden[1], context_turns=context_turns))
            if encoded_for[instance.id] is not None and len(encoded_for[instance.id].ids) > settings.max_length:
                log.info("skipping golden trajectory of %s: %d tokens > sft.max_length", instance.id,
                         len(encoded_for[instance.id].ids))
                encoded_for[instance.id] = None
        encoded = encoded_for[instance.id]
        if encoded is None:
            continue
        examples.append({"input_ids": encoded.ids, "assistant_masks": encoded.mask})
        distinct.add(instance.id)
        kept[stratum(instance)] += 1
        if settings.max_examples is not None and len(examples) >= settings.max_examples:
            break
    # which way the warm start routes follows this mix (docs/design.md), so the log keeps it
    log.info("warm start: %d golden trajectories (%s; %d distinct)", len(examples),
             ", ".join(f"{name} {n}" for name, n in kept.most_common()) or "none",
             len(distinct))
    return examples


def one_per_task(instances: list[Instance], seed: int) -> list[Instance]:
    """`instances` in a seeded order, each task once (its first instance in that order)."""
    shuffled = list(instances)
    random.Random(seed).shuffle(shuffled)
    first: dict[tuple[str, str | None, str], Instance] = {}
    for instance in shuffled:
        first.setdefault((instance.kind, instance.domain, instance.task_id), instance)
    return list(first.values())


def stratum(instance: Dealt) -> str:
    """The kind of golden trajectory: `tool_use`, `first_call`, `recovery`, or a QA item's
    category (arithmetic, lookup, count, aggregate)."""
    return str(instance.task.get("category") or instance.kind) if instance.kind == "qa" else instance.kind


def repeated(order: list[Dealt], repeat: dict[str, int]) -> list[Dealt]:
    """`order`, then further passes over the instances whose stratum `repeat` deals more than once:
    every instance once before any twice, so a `max_examples` cut drops repeats first."""
    passes = max((repeat.get(stratum(i), 1) for i in order), default=1)
    return [i for n in range(passes) for i in order if repeat.get(stratum(i), 1) > n]


def interleave_strata(order: list[Dealt], repeat: dict[str, int] | None = None) -> list[Dealt]:
    """`order` dealt round-robin over its strata (each stratum keeping its own order), so the first
    `max_examples` hold every category as evenly as its candidates allow. A seeded shuffle alone
    follows the pool's mix: the demo of 2026-12-04 took ~14 counts and ~6 aggregates among 96
    examples (53 calculations, 31 lookups) and its policy sent every held-out count and aggregate to
    `local_search`, as lookups go. A stratum in `repeat` is dealt that many passes over its
    instances (every instance once before any twice)."""
    queues: dict[str, deque[Dealt]] = defaultdict(deque)
    for instance in order:
        queues[stratum(instance)].append(instance)
    for name in queues:
        queues[name] = deque(repeated(list(queues[name]), repeat or {}))
    dealt: list[Dealt] = []
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
