"""The training configuration: one validated model shared by the `train` stage and `orchestra train`.

Sections: `data` (which instances), `episode` (how rollouts run), `sft` (the warm start on golden
trajectories), `grpo` (TRL's GRPOTrainer), `select` (warm start or GRPO's policy, chosen on the
validation split), `verl` (the cluster backend). Unknown keys are rejected
and cross-field problems are reported with how to fix them.

Defaults are the embedded CPU profile for SmolLM2-135M: a short SFT warm start (the base model
emits no parseable tool call), then a few GRPO steps of 4 rollouts with short turns. The SFT
default stays small on purpose: too many steps make every rollout of a group identical (zero
reward spread, no gradient; watch `frac_reward_zero_std`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toolorchestra.episodes.environment import EpisodeConfig
from toolorchestra.episodes.reward import DEFAULT_DEAD_BAND, DeadBand
from toolorchestra.llm.gguf_export import GGUFWeights

_STRICT = ConfigDict(extra="forbid", frozen=True)


class DataConfig(BaseModel):
    model_config = _STRICT

    split: str = Field("train", description="split of a datasets folder to train on")
    kinds: list[Literal["tool_use", "qa"]] = Field(default_factory=lambda: ["tool_use", "qa"])
    max_instances: int | None = Field(None, ge=1, le=10_000_000, description="cap (a seeded sample) for tiny profiles")
    max_actions: int | None = Field(None, ge=1, le=10_000, description="keep tool-use tasks with at most this many golden calls")
    assembly: dict[str, object] = Field(
        default_factory=dict,
        description="AssemblyConfig fields, used only when instances are assembled from validated tasks here",
    )


SFT_STRATA = ("tool_use", "first_call", "recovery", "lookup", "count", "aggregate", "arithmetic")
"""The warm start's strata (`rl.sft.stratum`): tickets, longer tickets' first calls, programs
retried after a failed one, and the QA categories `synthesis.qa.CATEGORIES` labels items with
(named here, not imported: the train stage would depend on the synthesis code)."""


class SFTSettings(BaseModel):
    """Supervised warm start on golden trajectories (TRL's SFTTrainer)."""

    model_config = _STRICT

    enabled: bool = True
    steps: int = Field(6, ge=1, le=1_000_000)
    batch_size: int = Field(2, ge=1, le=65_536)
    learning_rate: float = Field(1e-4, gt=0)
    max_length: int = Field(4096, ge=64, le=1_048_576, description="tokens per example; longer examples are dropped")
    max_examples: int | None = Field(64, ge=1, le=10_000_000)
    micro_batch_size: int | None = Field(
        None, ge=1, le=65_536,
        description="sequences per forward pass, batch_size of them per optimiser step (gradient accumulation); "
                    "None: 1 on the CPU (no padding, unmasked attention), batch_size on a GPU")
    group_by_length: bool = Field(True, description="micro-batches of similar lengths (less padding); false: random")
    stratify: bool = Field(False, description="take examples round-robin over the task categories (tool use, and each QA "
                                              "category) rather than in the pool's mix")
    first_calls: int = Field(
        0, ge=0, le=10_000_000,
        description="examples of a tool-use task's first golden call alone (stratum first_call), from training "
                    "tasks with more than data.max_actions golden calls: a domain tool called with its own "
                    "parameters, which the few short tickets alone did not teach")
    recoveries: list[Literal["arithmetic", "count", "aggregate"]] = Field(
        default_factory=list,
        description="QA categories whose golden programs are also dealt after a failed try (stratum recovery): a "
                    "broken version of the program, its real error, then the golden program and its answer; only "
                    "the retry and the answer are trained")
    repeat: dict[str, int] = Field(
        default_factory=dict,
        description="stratum -> times each of its golden trajectories is dealt (tool_use, first_call, or a QA "
                    "category: arithmetic, lookup, count, aggregate); a rare stratum weighs more without more tasks")

    @field_validator("repeat")
    @classmethod
    def _known_strata(cls, repeat: dict[str, int]) -> dict[str, int]:
        unknown = sorted(set(repeat) - set(SFT_STRATA))
        if unknown:
            raise ValueError(f"unknown strata {unknown}; known: {', '.join(SFT_STRATA)}")
        low = sorted(name for name, times in repeat.items() if times < 1)
        if low:
            raise ValueError(f"repeat counts must be at least 1: {low}")
        return repeat

    @model_validator(mode="after")
    def _micro_divides_batch(self) -> SFTSettings:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(f"micro_batch_size {self.micro_batch_size} must divide batch_size {self.batch_size}")
        return self

    def micro_batch(self, use_cpu: bool) -> int:
        """Sequences per forward pass on this device."""
        if self.micro_batch_size is not None:
            return self.micro_batch_size
        return 1 if use_cpu else self.batch_size


class BandSettings(BaseModel):
    """One key family's dead band: a group range at most max(absolute, relative * largest |value|)
    counts as constant (`toolorchestra.episodes.reward`)."""

    model_config = _STRICT

    absolute: float = Field(0.0, ge=0, allow_inf_nan=False, description="in the metric's unit")
    relative: float = Field(0.0, ge=0, allow_inf_nan=False, description="fraction of the group's largest magnitude")


def _band(key: str) -> BandSettings:
    default = DEFAULT_DEAD_BAND[key]
    return BandSettings(absolute=default.absolute, relative=default.relative)


class DeadBandSettings(BaseModel):
    """Dead bands per key family; defaults are the reward module's `DEFAULT_DEAD_BAND`."""

    model_config = _STRICT

    cost: BandSettings = Field(default_factory=lambda: _band("cost"), description="USD")
    latency: BandSettings = Field(default_factory=lambda: _band("latency"), description="seconds")
    calls: BandSettings = Field(default_factory=lambda: _band("calls"), description="calls (every calls/<tool>)")

    def bands(self) -> dict[str, DeadBand]:
        """The mapping `group_rewards(dead_band=...)` takes."""
        return {key: DeadBand(absolute=b.absolute, relative=b.relative)
                for key, b in (("cost", self.cost), ("latency", self.latency), ("calls", self.calls))}


class GRPOSettings(BaseModel):
    """TRL GRPOTrainer settings (the loss and optimiser are TRL's)."""

    model_config = _STRICT

    steps: int = Field(3, ge=1, le=1_000_000)
    num_generations: int = Field(4, ge=2, description="rollouts per instance: one GRPO group")
    prompts_per_step: int = Field(1, ge=1, le=65_536, description="groups per optimisation step")
    learning_rate: float = Field(1e-5, gt=0)
    beta: float = Field(0.0, ge=0, description="KL coefficient; > 0 loads a frozen reference model")
    epsilon: float = Field(0.2, gt=0)
    epsilon_high: float = Field(0.28, gt=0)
    clip_advantage: float = Field(3.0, gt=0)
    min_std: float = Field(0.1, ge=0, description="groups whose reward spread is at most this are filtered")
    refill_rounds: int = Field(0, ge=0, le=16, description="DAPO's dynamic sampling: draws of a fresh training "
                               "instance for each group without reward spread (0: the group is only filtered)")
    stratify: bool = Field(False, description="deal each step's prompts round-robin over the task categories "
                           "(tool use and each QA category, as sft.stratify) instead of TRL's seeded shuffle")
    dead_band: DeadBandSettings = Field(default_factory=DeadBandSettings,
                                        description="metric ranges that count as constant (both backends)")
    temperature: float = Field(1.0, gt=0)
    max_completion_length: int = Field(1024, ge=16, le=1_048_576, description="tokens of a whole multi-turn completion")
    save_steps: int = Field(1, ge=1, le=1_000_000)
    loss_type: str = "dapo"
    gradient_checkpointing: bool = False
    rollout_engine: Literal["transformers", "llamacpp", "vllm"] = Field(
        "transformers", description="what generates the rollouts: transformers' generate on the training "
        "model, llama.cpp on a GGUF export of its weights made at every step (rl.llamacpp_rollouts), or "
        "vLLM colocated on the training GPU by TRL (rl.vllm_rollouts; CUDA and the gpu extra)")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="GPU share of the colocated vLLM")
    rollout_weights: GGUFWeights = Field("f16", description="the llama.cpp export's weight type")
    rollout_threads: int = Field(1, ge=1, le=512, description="llama.cpp threads for rollouts")

    @model_validator(mode="after")
    def _check(self) -> GRPOSettings:
        if self.epsilon_high < self.epsilon:
            raise ValueError("grpo.epsilon_high must be >= grpo.epsilon (the upper clip of the ratio)")
        return self


class VerlSettings(BaseModel):
    """The cluster backend (verl 0.9 GRPO on Ray); defaults are the paper's."""

    model_config = _STRICT

    model: str = "Qwen/Qwen3-8B"
    nnodes: int = Field(2, ge=1, le=4_096)
    n_gpus_per_node: int = Field(8, ge=1, le=64)
    learning_rate: float = Field(1e-6, gt=0)
    rollouts_per_task: int = Field(8, ge=2, le=1_024)
    train_batch_size: int = Field(16, ge=1, le=1_000_000, description="tasks per step")
    ppo_mini_batch_size: int = Field(16, ge=1, le=1_000_000)
    micro_batch_size_per_gpu: int = Field(1, ge=1, le=4_096)
    clip_ratio_low: float = Field(0.2, gt=0)
    clip_ratio_high: float = Field(0.28, gt=0)
    kl_loss_coef: float = Field(1e-4, ge=0)
    max_turns: int = Field(30, ge=1, le=1_000)
    prompt_length: int = Field(8192, ge=256, le=1_048_576)
    response_length: int = Field(8192, ge=256, le=1_048_576)
    max_tool_response_length: int = Field(4096, ge=64, le=1_048_576)
    tensor_model_parallel_size: int = Field(2, ge=1, le=64)
    gpu_memory_utilization: float = Field(0.6, gt=0, le=1)
    total_epochs: int = Field(1, ge=1, le=100_000)
    total_training_steps: int | None = Field(None, ge=1, le=100_000_000)
    save_freq: int = Field(10, ge=-1)
    test_freq: int = Field(-1, ge=-1)
    project_name: str = "toolorchestra"
    experiment_name: str = "orchestrator-grpo"
    ray_address: str | None = Field(None, description="existing cluster; None: RAY_ADDRESS or a local one")
    submit: Literal["direct", "job"] = Field("direct", description="run main_ppo here, or `ray job submit`")
    overrides: list[str] = Field(default_factory=list, description="extra Hydra overrides, appended last")

    @model_validator(mode="after")
    def _check(self) -> VerlSettings:
        if self.ppo_mini_batch_size > self.train_batch_size:
            raise ValueError("verl.ppo_mini_batch_size must not exceed verl.train_batch_size")
        return self


class SelectSettings(BaseModel):
    """Which policy the run exports: GRPO's, or the warm start when GRPO's solves fewer of the
    validation split's tasks (greedy episodes, `rl.select`). Needs a warm start and a dataset with
    that split (the preferences stage's `validation_task_fraction`); otherwise GRPO's is exported."""

    model_config = _STRICT

    enabled: bool = True
    split: str = Field("validation", description="split of the datasets folder the choice is made on")
    max_instances: int | None = Field(None, ge=1, le=1_000_000, description="cap (a seeded sample)")
    max_drop: int = Field(0, ge=0, le=1_000_000, description=(
        "GRPO's policy is kept when it solves at least the warm start's count minus this many"))


MixedPrecision = Literal["auto", "bf16", "no"]
"""`train.mixed_precision`: see TrainConfig."""


class TrainConfig(BaseModel):
    """Everything one training run needs besides its input and output paths."""

    model_config = _STRICT

    backend: Literal["trl", "verl"] = "trl"
    base_model: str = Field("smollm2-135m-instruct", description="`smollm2-135m-instruct` or a model folder")
    init_from: str | None = Field(None, description="start from this checkpoint folder instead of base_model")
    seed: int = 0
    device: str = Field("auto", description="auto | cpu | cuda[:N]")
    mixed_precision: MixedPrecision = Field(
        "auto", description="auto: bf16 on CUDA (bf16 weights) and on CPUs with native bf16 instructions "
        "(fp32 weights, bf16 autocast: ~2.5x faster SFT steps on AVX512-BF16); no: fp32 everywhere")
    engine: Literal["transformers", "llamacpp"] | None = Field(
        None, description="engine of the catalog's local models (experts) during training; None: as the catalog says")
    data: DataConfig = DataConfig()
    episode: EpisodeConfig = EpisodeConfig()
    sft: SFTSettings = SFTSettings()
    grpo: GRPOSettings = GRPOSettings()
    verl: VerlSettings = VerlSettings()
    select: SelectSettings = SelectSettings()
    resume: bool = Field(True, description="continue from the last checkpoint of an identical interrupted run")
    log_checkpoint_artifact: bool = Field(True, description="log the final checkpoint to MLflow")

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.sft.enabled and self.data.kinds == ["qa"]:
            raise ValueError("sft.enabled needs tool-use instances (QA tasks have no golden trajectory): "
                             "add tool_use to data.kinds or set sft.enabled: false")
        return self
