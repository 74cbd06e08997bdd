"""The TRL backend: TRL's GRPOTrainer driving the project's multi-turn environment.

Why `rollout_func` and not TRL's own tool loop (`tools` / `environment_factory`): an episode here
is the project's agent loop (per-episode database state, catalog tools priced per instance, LLM
experts, an `answer` tool that ends the episode) scored by the project's scorer, and the reward
needs the whole trajectory. TRL's loop only calls plain Python functions and parses with a
response schema. So the phases are:

1. **rollout** (`OrchestraRollouts`, TRL's `rollout_func`): TRL hands over the step's prompts,
   already repeated `num_generations` times; each names its instance (`instance_id` on the user
   message). The environment runs every episode in lockstep with the policy being trained
   (`RolloutPolicy`), and each transcript is encoded token-exactly: `prompt_ids`, `completion_ids`
   (every later turn, observations included) and `env_mask` (1 on sampled tokens, 0 on tool
   observations and template text: TRL multiplies it into the loss mask, so observations carry no
   gradient). Logprobs are not returned: TRL recomputes them with the same model.
2. **score** (`OrchestraAdvantage.score`): per group, every rollout goes through `group_rewards`
   (with the settings' dead band) and then `group_advantages`, the one reward contract
   (`toolorchestra.episodes.reward`). An invalid rollout (malformed call or no answer) counts as
   wrong inside its group: reward 0, accuracy 0, its cost and latency on the scale, as in the
   released code. The value handed to TRL (`reward_funcs`) is that advantage.
3. **filtered groups leave the batch**: a group whose advantages are `None` (no reward spread)
   carries no gradient, and TRL would still count its tokens in the loss normaliser
   (`num_items_in_batch`, the loss mask's sum) and so shrink every other group's update. TRL
   computes that mask from `completion_mask * env_mask` right after the rollout, before any reward
   exists, and `env_mask` is the rollout function's to set; so the rollout function scores the
   groups itself (the same pure `score`, again in the reward function: it is cheap and
   deterministic) and returns an all-zero `env_mask` for a filtered group's completions. They then
   add nothing to the loss, the KL term or the normaliser; TRL's loss is not re-implemented.
   With `refill_rounds` (DAPO's dynamic sampling) such a group is first replaced, where it can be,
   by the group of a training instance not yet in the step that does have spread: rollouts on
   llama.cpp cost a fraction of the step's forward and backward, so a step trains on more groups
   that carry a gradient for little more time (`groups_refilled` in the step's metrics).
4. **advantage**: with `scale_rewards="none"` TRL computes `r - mean(r)` per group. Our advantages
   are z-scores (mean 0 within the group), so TRL's advantages are exactly `group_advantages`, as
   long as no z-score was clipped: with `num_generations <= 10` a z-score cannot exceed 3 (its
   bound is (n-1)/sqrt(n)), so with the default clip of 3 the equality is exact; beyond that a
   clipped group is re-centred by TRL.
5. **update**: TRL's loss (`loss_type`, PPO-style clipping with `epsilon` / `epsilon_high`, optional
   KL with `beta`) and optimiser, unchanged; but the loss runs only on the rows that carry a loss
   token and on the columns they use, on a CPU one row at a time (`loss_rows`). TRL pads every row to
   the step's longest prompt and completion and shuffles the step's rollouts across micro-batches,
   so a filtered group's masked rows (3 or 4 of the demo's 8 groups) sat among trained ones: their
   forward and backward, and every row's padding, added nothing to a loss whose DAPO normaliser
   spans the whole step.

The real reward statistics (the advantage is what TRL sees as "reward") are logged through TRL's
`log_metric` under `orchestra/...`: reward mean/std, accuracy, format-valid and answered rates,
mean cost and latency, calls per tool, the share of groups filtered (`groups_filtered`: masked
out of the loss) and of groups with zero reward spread (`frac_reward_zero_std`), and the share of
completions masked out (`completions_masked`), and the seconds the step spent generating its
rollouts (`rollout_s`; TRL's `step_time` less that is the optimisation). Runs on one process (CPU, or one CUDA GPU in bf16); a group must not be split across
processes, which a single process guarantees.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.environment import Rollout, RolloutEnvironment
from toolorchestra.episodes.instance import Instance
from toolorchestra.episodes.reward import DeadBand, group_advantages, group_rewards
from toolorchestra.rl.config import GRPOSettings
from toolorchestra.rl.sft import interleave_strata
from toolorchestra.rl.transcript import RolloutPolicy
from toolorchestra.rl.trl_cpu import compact_fused_head_on_cpu

INSTANCE_KEY = "instance_id"


def prompt_row(instance: Instance) -> dict[str, Any]:
    """A dataset row: the instance's conversational prompt, tagged with its id."""
    system, *rest = [dict(m) for m in instance.prompt]
    rest[-1][INSTANCE_KEY] = instance.id
    system[INSTANCE_KEY] = None  # every message has the same keys (one Arrow struct type)
    for message in rest[:-1]:
        message[INSTANCE_KEY] = None
    return {"prompt": [system, *rest], INSTANCE_KEY: instance.id}


class OrchestraRollouts:
    """TRL `rollout_func`: run the episodes and return token-exact completions with `env_mask`."""

    def __init__(self, env: RolloutEnvironment, instances: list[Instance], tokenizer: Any,
                 *, max_completion_length: int, temperature: float,
                 scorer: OrchestraAdvantage | None = None, refill_rounds: int = 0, seed: int = 0) -> None:
        self.env, self.tokenizer, self.scorer = env, tokenizer, scorer
        self.by_id = {i.id: i for i in instances}
        self.max_completion_length, self.temperature = max_completion_length, temperature
        self.refill_rounds = refill_rounds
        self._draw = random.Random(seed)
        self.policy_factory: Callable[..., RolloutPolicy] = RolloutPolicy
        self.last: list[Rollout] = []
        self.last_sampled_tokens = 0  # the tokens the policy sampled in the last call, filtered groups included
        self.last_refilled = 0  # groups of the last call replaced by a fresh instance's group with spread

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, Any]:
        began = time.perf_counter()
        try:
            instances = [self.by_id[p[-1][INSTANCE_KEY]] for p in prompts]
        except (KeyError, TypeError, IndexError) as exc:
            raise ConfigError(None, f"a prompt does not name a known instance ({exc}); build the dataset "
                              "with prompt_row()", key=INSTANCE_KEY) from None
        model = trainer.accelerator.unwrap_model(trainer.model)
        policy = self.policy_factory(model, self.tokenizer, name="policy")
        with trainer.accelerator.autocast():  # generation in the run's precision (bf16 autocast on CPU)
            rollouts = self.env.run(policy, instances, temperature=self.temperature)
            rollouts, discarded = self._refill(policy, rollouts)
        prompt_ids, completion_ids, env_mask = [], [], []
        for rollout in rollouts:
            messages = rollout.trajectory.messages
            encoded = policy.encoder.encode(messages, rollout.tools, sampled=policy.sampled(messages))
            ids = encoded.completion_ids[: self.max_completion_length]
            mask = encoded.completion_mask[: self.max_completion_length]
            if not ids:  # the policy failed before its first turn: one masked eos keeps shapes valid
                ids, mask = [policy.encoder.eos_id], [0]
            prompt_ids.append(encoded.prompt_ids)
            completion_ids.append(ids)
            env_mask.append(mask)
        self.last_sampled_tokens = sum(sum(mask) for mask in env_mask) + sum(
            len(ids) for r in discarded for ids in policy.sampled(r.trajectory.messages))
        policy.clear()
        if self.scorer is not None:  # a filtered group leaves the loss and its normaliser
            score = self.scorer.score(rollouts)
            env_mask = [[0] * len(mask) if adv is None else mask for mask, adv in zip(env_mask, score.advantages, strict=True)]
        self.last = rollouts
        # The step's generation phase, for its split against the optimisation (`orchestra/rollout_s`
        # next to TRL's `step_time`): a scalar reaches every reward call as is.
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None,
                "env_mask": env_mask, "rollout": rollouts, "rollout_seconds": time.perf_counter() - began,
                "groups_refilled": self.last_refilled}

    def _refill(self, policy: RolloutPolicy, rollouts: list[Rollout]) -> tuple[list[Rollout], list[Rollout]]:
        """DAPO's dynamic sampling: each group without reward spread is replaced by the group of an
        instance not yet in this step, drawn from the training set, when that group has spread; up to
        `refill_rounds` draws per group. A group that found none stays (and is masked out of the loss).
        The prompts TRL handed over are then not all the step's prompts: TRL trains on the returned
        `prompt_ids`, and the reward sees the returned rollouts. Returns the step's rollouts and those
        generated but not kept."""
        self.last_refilled = 0
        discarded: list[Rollout] = []
        if self.scorer is None or not self.refill_rounds:
            return rollouts, discarded
        size = self.scorer.num_generations
        used = {r.instance.id for r in rollouts}
        for _ in range(self.refill_rounds):
            advantages = self.scorer.score(rollouts).advantages
            dead = [start for start in range(0, len(rollouts), size) if advantages[start] is None]
            pool = [i for i in self.by_id.values() if i.id not in used]
            if not dead or not pool:
                break
            fresh = self._draw.sample(pool, min(len(dead), len(pool)))
            used.update(i.id for i in fresh)
            runs = self.env.run(policy, [i for i in fresh for _ in range(size)], temperature=self.temperature)
            fresh_advantages = self.scorer.score(runs).advantages
            for k, start in enumerate(dead[:len(fresh)]):
                group = runs[k * size:(k + 1) * size]
                if fresh_advantages[k * size] is None:
                    discarded.extend(group)
                else:
                    discarded.extend(rollouts[start:start + size])
                    rollouts[start:start + size] = group
                    self.last_refilled += 1
        return rollouts, discarded


@dataclass
class BatchScore:
    """One step's rollouts scored: per rollout its reward and advantage (`None`: its group is
    filtered), and the counts the step's metrics need."""

    rewards: list[float]
    advantages: list[float | None]
    groups: int
    filtered: int
    zero_spread: int


class OrchestraAdvantage:
    """TRL reward function: the reward contract's advantages per group (see the module docstring)."""

    __name__ = "orchestra"

    def __init__(self, env: RolloutEnvironment, num_generations: int, *, clip: float = 3.0,
                 min_std: float = 0.1, dead_band: Mapping[str, DeadBand] | None = None) -> None:
        self.env, self.num_generations, self.clip, self.min_std = env, num_generations, clip, min_std
        self.dead_band = dead_band
        self.last_rewards: list[float] = []
        self.last_stats: dict[str, float] = {}

    def score(self, rollout: list[Rollout]) -> BatchScore:
        """Rewards and advantages of consecutive groups of `num_generations` rollouts; an invalid
        rollout is a wrong one of its group."""
        n, size = len(rollout), self.num_generations
        if n % size:
            raise ValueError(f"{n} rollouts do not form groups of {size}")
        rewards: list[float] = []
        advantages: list[float | None] = []
        filtered = zero_spread = 0
        for start in range(0, n, size):
            group = rollout[start:start + size]
            if len({r.instance.id for r in group}) != 1:
                raise ValueError("a GRPO group mixes instances; rollouts must arrive grouped by prompt")
            values = group_rewards([r.metrics() for r in group], [r.valid and r.correct for r in group],
                                   self.env.preference(group[0].instance), self.dead_band)
            adv = group_advantages(values, clip=self.clip, min_std=self.min_std)
            filtered += adv is None
            zero_spread += max(values) == min(values)
            rewards.extend(values)
            advantages.extend(adv if adv is not None else [None] * size)
        return BatchScore(rewards, advantages, groups=n // size, filtered=filtered, zero_spread=zero_spread)

    def __call__(self, prompts: list[Any], completions: list[Any], rollout: list[Rollout],
                 log_metric: Callable[[str, float], None] | None = None,
                 rollout_seconds: list[float] | None = None, groups_refilled: list[int] | None = None,
                 **_: Any) -> list[float]:
        score = self.score(rollout)
        self.last_rewards = score.rewards
        self.last_stats = batch_stats(rollout, score)
        if rollout_seconds:  # one value per completion, all the same: the step's generation phase
            self.last_stats["rollout_s"] = float(rollout_seconds[0])
        if groups_refilled:  # the share of groups drawn again: filtered + refilled = first draw's filtered
            self.last_stats["groups_refilled"] = groups_refilled[0] / score.groups
        if log_metric is not None:
            for key, value in self.last_stats.items():
                log_metric(f"orchestra/{key}", value)
        # A filtered group's completions are masked out of the loss by the rollout function; 0
        # keeps TRL's per-group centring finite for them.
        return [a if a is not None else 0.0 for a in score.advantages]


PROMPT_KEYS = ("prompt_ids", "prompt_mask")


def loss_rows(inputs: Mapping[str, Any], *, one_per_row: bool = True) -> list[dict[str, Any]]:
    """A GRPO micro-batch cut to its rows that carry a loss token (`completion_mask` times TRL's
    `tool_mask`, which the rollout function zeroes for a filtered group): one micro-batch per row
    (`one_per_row`, for a CPU) or one of them all (a GPU, where a batch costs no more than a row),
    each cut to the columns its rows use: no shared prompt left padding or completion right padding.

    Summed, their losses are the micro-batch's for the DAPO family (a token sum over the step's
    `num_items_in_batch`, computed by TRL before this split): a masked row adds zero, a padding
    column is masked. A trimmed prompt shifts its rows' positions by a constant, which rotary
    position embeddings do not see (float rounding aside). Per-row tensors are those whose first
    dimension is the batch; per-token ones those of the completion's width (the prompt's are named)."""
    import torch

    completion_mask = inputs["completion_mask"]
    mask = completion_mask * inputs["tool_mask"] if "tool_mask" in inputs else completion_mask
    kept = [row for row in range(mask.size(0)) if bool(mask[row].any())]
    groups = [[row] for row in kept] if one_per_row else ([kept] if kept else [])
    return [_cut(inputs, torch.tensor(rows)) for rows in groups]


def _cut(inputs: Mapping[str, Any], rows: Any) -> dict[str, Any]:
    """`inputs` at `rows`, without the prompt columns and completion columns none of them uses."""
    import torch

    batch, width = inputs["completion_mask"].size(0), inputs["completion_mask"].size(1)
    used = torch.nonzero(inputs["completion_mask"][rows].sum(dim=0))
    end = int(used.max()) + 1 if used.numel() else width
    prompt_used = torch.nonzero(inputs["prompt_mask"][rows].sum(dim=0))
    start = int(prompt_used.min()) if prompt_used.numel() else 0
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == batch:
            value = value[rows]
            if key in PROMPT_KEYS:
                value = value[:, start:]
            elif value.dim() >= 2 and value.size(1) == width:
                value = value[:, :end]
        out[key] = value
    return out


# TRL's loss types whose value is a sum over tokens divided by a normaliser computed for the whole
# step (`num_items_in_batch`): a micro-batch's loss is the sum of its rows' losses.
ROW_SEPARABLE_LOSSES = frozenset({"dapo", "cispo", "vespo"})


@functools.cache
def orchestra_grpo_trainer() -> type:
    """TRL's GRPOTrainer whose loss runs row by row on `loss_rows` (see the module docstring).
    Built on first use: importing TRL takes seconds."""
    from trl import GRPOTrainer

    class OrchestraGRPOTrainer(GRPOTrainer):  # type: ignore[misc, valid-type]
        def rows_separable(self) -> bool:
            """Whether the loss is a sum of per-row terms: no per-batch entropy quantile or bonus,
            and no MoE router loss (added once per call)."""
            return (self.loss_type in ROW_SEPARABLE_LOSSES and self.top_entropy_quantile >= 1.0
                    and not self._entropy_bonus_enabled and not self.aux_loss_enabled)

        def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
            if not self.rows_separable():
                return super()._compute_loss(model, inputs)
            # On a CPU a padded row costs its padding; on a GPU one batch beats several launches.
            return self.loss_on_rows(model, inputs, one_per_row=self.accelerator.device.type == "cpu")

        def loss_on_rows(self, model: Any, inputs: dict[str, Any], *, one_per_row: bool) -> Any:
            """TRL's loss summed over `loss_rows(inputs, one_per_row=...)`."""
            parts = loss_rows(inputs, one_per_row=one_per_row)
            if not parts:  # no forward at all; a zero that backward accepts
                return next(p for p in model.parameters() if p.requires_grad).sum() * 0.0
            return sum(super(OrchestraGRPOTrainer, self)._compute_loss(model, part) for part in parts)

    return OrchestraGRPOTrainer


def batch_stats(rollouts: list[Rollout], score: BatchScore) -> dict[str, float]:
    """The step's orchestrator metrics (rewards and rates over every rollout)."""
    n, rewards, groups = len(rollouts), score.rewards, score.groups
    stats = {
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards) if n > 1 else 0.0,
        "accuracy": sum(r.correct for r in rollouts) / n,
        "format_valid_rate": sum(r.format_valid for r in rollouts) / n,
        "answered_rate": sum(r.answered for r in rollouts) / n,
        "valid_rate": sum(r.valid for r in rollouts) / n,
        "cost_mean": statistics.fmean(r.trajectory.cost_usd for r in rollouts),
        "latency_mean": statistics.fmean(r.trajectory.latency_s for r in rollouts),
        "turns_mean": statistics.fmean(len(r.trajectory.turns) for r in rollouts),
        "groups_filtered": score.filtered / groups,
        "frac_reward_zero_std": score.zero_spread / groups,
        "completions_masked": sum(a is None for a in score.advantages) / n,
    }
    calls: Counter[str] = Counter()
    for rollout in rollouts:
        catalog = set(rollout.instance.catalog_tools)
        for tool, count in rollout.trajectory.tool_calls.items():
            calls[tool if tool in catalog else "domain"] += count
    for tool, count in sorted(calls.items()):
        stats[f"calls/{tool}"] = count / n
    return {k: v for k, v in stats.items() if math.isfinite(v)}


def step_order(instances: list[Instance], settings: GRPOSettings, seed: int) -> list[Instance]:
    """The training prompts in the order TRL deals them: as given (TRL shuffles them, seeded), or
    with `settings.stratify` shuffled by `seed` and then dealt round-robin over the task
    categories, so that every step of a few prompts holds each category instead of the pool's mix
    (about half calculations, which the warm start mostly solves four times of four)."""
    if not settings.stratify:
        return instances
    shuffled = list(instances)
    random.Random(seed).shuffle(shuffled)
    return [i for i in interleave_strata(shuffled) if isinstance(i, Instance)]


def grpo_args(settings: GRPOSettings, output_dir: Path, *, use_cpu: bool, seed: int, max_steps: int,
              bf16: bool | None = None) -> Any:
    from trl import GRPOConfig

    # All groups of a step are generated in one batch (TRL's generation batch = micro-batch x
    # accumulation), but the loss runs one group per micro-batch: full-vocabulary logits of 8
    # groups x 4 rollouts x ~1k tokens at once took 15.8 GB and the OOM killer on a 24 GB machine.
    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=max_steps,
        per_device_train_batch_size=settings.num_generations,
        gradient_accumulation_steps=settings.prompts_per_step,
        num_generations=settings.num_generations,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        beta=settings.beta,
        epsilon=settings.epsilon,
        epsilon_high=settings.epsilon_high,
        loss_type=settings.loss_type,
        scale_rewards="none",  # our advantages are already z-scores: see the module docstring
        temperature=settings.temperature,
        max_completion_length=settings.max_completion_length,
        gradient_checkpointing=settings.gradient_checkpointing,
        logging_steps=1,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=1,
        report_to="none",
        disable_tqdm=True,
        use_cpu=use_cpu,
        bf16=(not use_cpu) if bf16 is None else bf16,  # on CPU: autocast over fp32 weights
        seed=seed,
        remove_unused_columns=False,
        shuffle_dataset=not settings.stratify,  # a stratified dataset is already in its seeded order
        model_init_kwargs={"dtype": "float32" if use_cpu else "bfloat16"},
        dataloader_num_workers=0,
        **vllm_args(settings, use_cpu=use_cpu),
    )


def vllm_args(settings: GRPOSettings, *, use_cpu: bool) -> dict[str, Any]:
    """TRL's colocated vLLM engine for `rollout_engine: vllm` (weights synced every step by TRL)."""
    if settings.rollout_engine != "vllm":
        return {}
    if use_cpu:
        raise ConfigError(None, "grpo.rollout_engine: vllm needs a CUDA GPU; on a CPU use llamacpp or transformers",
                          key="grpo.rollout_engine")
    return {"use_vllm": True, "vllm_mode": "colocate", "vllm_enable_sleep_mode": False,
            "vllm_gpu_memory_utilization": settings.vllm_gpu_memory_utilization,
            "vllm_max_model_length": settings.max_completion_length + 8192}


def build_grpo_trainer(
    model_path: str | Path,
    tokenizer: Any,
    env: RolloutEnvironment,
    instances: list[Instance],
    settings: GRPOSettings,
    output_dir: Path,
    *,
    use_cpu: bool,
    bf16: bool | None = None,
    seed: int = 0,
    max_steps: int | None = None,
    callbacks: list[Any] | None = None,
) -> Any:
    """A GRPOTrainer over `instances`. The model is loaded from `model_path`, and so is the frozen
    reference model when `beta > 0` (so a warm-started model is its own reference)."""
    import os

    import datasets

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    if not instances:
        raise ConfigError(None, "no training instances", key="data")
    dataset = datasets.Dataset.from_list([prompt_row(i) for i in step_order(instances, settings, seed)])
    reward = OrchestraAdvantage(env, settings.num_generations, clip=settings.clip_advantage,
                                min_std=settings.min_std, dead_band=settings.dead_band.bands())
    rollouts = OrchestraRollouts(env, instances, tokenizer, max_completion_length=settings.max_completion_length,
                                 temperature=settings.temperature, scorer=reward,
                                 refill_rounds=settings.refill_rounds, seed=seed)
    if settings.rollout_engine == "llamacpp":
        from toolorchestra.rl.llamacpp_rollouts import LlamaCppRollouts

        rollouts.policy_factory = LlamaCppRollouts(model_path, output_dir / "rollout-engine",
                                                   weights=settings.rollout_weights,
                                                   n_threads=settings.rollout_threads, seed=seed)
    args = grpo_args(settings, output_dir, use_cpu=use_cpu, bf16=bf16, seed=seed,
                     max_steps=max_steps or settings.steps)
    if settings.rollout_engine == "vllm":
        from toolorchestra.rl.vllm_rollouts import VLLMRollouts

        rollouts.policy_factory = VLLMRollouts(seed=seed)
    compact_fused_head_on_cpu()
    trainer = orchestra_grpo_trainer()(model=str(model_path), reward_funcs=[reward], args=args, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollouts, callbacks=callbacks)
    if settings.rollout_engine == "vllm":
        rollouts.policy_factory.bind_trainer(trainer)
    trainer.orchestra_rollouts, trainer.orchestra_reward = rollouts, reward
    return trainer
