"""verl configuration from `params.yaml`: Hydra overrides on verl's own `ppo_trainer` defaults.

`overrides(settings, files)` maps the `train.verl` section and the generated files onto
`verl.trainer.main_ppo`'s Hydra config: GRPO (`algorithm.adv_estimator=grpo`; the reward module
already returns the contract's advantage, so verl only centres it:
`algorithm.norm_adv_by_std_in_grpo=false`), async vLLM rollouts, multi-turn with our tool config and
agent loop (`orchestra_agent` as the default loop, so tools are never silently skipped), our
`custom_reward_function`, the paper's hyper-parameters by default (Qwen3-8B, lr 1e-6, 8 rollouts per
task, clip 0.2/0.28, KL loss 1e-4, 30 turns), console + MLflow logging (verl's default logger list
includes wandb), and `+ray_kwargs.ray_init.address` for an existing cluster.

`compose(overrides)` builds the config exactly as `main_ppo` would (Hydra compose over verl's
config folder) and `validate(config)` runs verl's own `validate_config` plus the dataclass checks
it applies to the actor, so `orchestra train --backend verl --dry-run` catches a broken
configuration on a laptop without a GPU. `reference_yaml(settings)` is the resolved YAML committed under
`infra/verl/` for reference (a test keeps it current).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.rl.config import VerlSettings
from toolorchestra.rl.verl.data import AGENT_NAME

REWARD_MODULE = "pkg://toolorchestra.rl.verl.reward"


@dataclass(frozen=True)
class VerlFiles:
    """The generated inputs a verl run reads."""

    train: Path
    val: Path
    tool_config: Path
    agent_loops: Path
    checkpoints: Path


def verl_config_dir() -> Path:
    import verl

    return Path(verl.__file__).parent / "trainer" / "config"


def _list(paths: list[Path]) -> str:
    return "[" + ",".join(f"'{p}'" for p in paths) + "]"


def _hydra_dict(bands: Mapping[str, Mapping[str, float]]) -> str:
    """`{cost: {absolute: 1e-09, relative: 0.01}, ...}` in Hydra's override grammar."""
    return "{" + ",".join(f"{k}:{{" + ",".join(f"{f}:{float(v)!r}" for f, v in b.items()) + "}"
                          for k, b in bands.items()) + "}"


def overrides(s: VerlSettings, files: VerlFiles, *, clip: float = 3.0, min_std: float = 0.1,
              dead_band: Mapping[str, Mapping[str, float]] | None = None,
              ray_address: str | None = None) -> list[str]:
    """Hydra overrides for `verl.trainer.main_ppo` (see the module docstring). `dead_band`:
    the GRPO settings' bands per key family (`DeadBandSettings.model_dump()`); None: the reward's
    defaults."""
    out = [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=false",
        "algorithm.use_kl_in_reward=false",
        f"data.train_files={_list([files.train])}",
        f"data.val_files={_list([files.val])}",
        f"data.train_batch_size={s.train_batch_size}",
        f"data.max_prompt_length={s.prompt_length}",
        f"data.max_response_length={s.response_length}",
        "data.return_raw_chat=true",
        "data.filter_overlong_prompts=true",
        "data.truncation=error",
        f"actor_rollout_ref.model.path={s.model}",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        f"actor_rollout_ref.actor.optim.lr={s.learning_rate}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={s.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={s.micro_batch_size_per_gpu}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"actor_rollout_ref.actor.kl_loss_coef={s.kl_loss_coef}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        f"actor_rollout_ref.actor.clip_ratio_low={s.clip_ratio_low}",
        f"actor_rollout_ref.actor.clip_ratio_high={s.clip_ratio_high}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={s.micro_batch_size_per_gpu}",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={s.rollouts_per_task}",
        # The reward waits for rollout.n members per group: validation groups must be as large.
        f"actor_rollout_ref.rollout.val_kwargs.n={s.rollouts_per_task}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={s.tensor_model_parallel_size}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={s.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={s.micro_batch_size_per_gpu}",
        f"actor_rollout_ref.rollout.prompt_length={s.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={s.response_length}",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={s.max_turns}",
        f"actor_rollout_ref.rollout.multi_turn.max_user_turns={s.max_turns}",
        f"actor_rollout_ref.rollout.multi_turn.max_tool_response_length={s.max_tool_response_length}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={files.tool_config}",
        "actor_rollout_ref.rollout.multi_turn.format=hermes",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={files.agent_loops}",
        f"reward.custom_reward_function.path={REWARD_MODULE}",
        "reward.custom_reward_function.name=compute_score",
        f"+reward.custom_reward_function.reward_kwargs.clip={clip}",
        f"+reward.custom_reward_function.reward_kwargs.min_std={min_std}",
        *([f"+reward.custom_reward_function.reward_kwargs.dead_band={_hydra_dict(dead_band)}"] if dead_band else []),
        "trainer.logger=[console,mlflow]",
        f"trainer.project_name={s.project_name}",
        f"trainer.experiment_name={s.experiment_name}",
        f"trainer.nnodes={s.nnodes}",
        f"trainer.n_gpus_per_node={s.n_gpus_per_node}",
        f"trainer.total_epochs={s.total_epochs}",
        f"trainer.save_freq={s.save_freq}",
        f"trainer.test_freq={s.test_freq}",
        "trainer.val_before_train=false",
        f"trainer.default_local_dir={files.checkpoints}",
    ]
    if s.total_training_steps is not None:
        out.append(f"trainer.total_training_steps={s.total_training_steps}")
    address = ray_address or s.ray_address
    if address:
        out.append(f"+ray_kwargs.ray_init.address={address}")
    return [*out, *s.overrides]


def compose(hydra_overrides: list[str]) -> Any:
    """verl's `ppo_trainer` config with the overrides, composed as `main_ppo` composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return hydra_compose(config_name="ppo_trainer", overrides=list(hydra_overrides))
    except (OmegaConfBaseException, Exception) as exc:  # hydra raises several unrelated types
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(None, f"verl rejected the overrides: {str(exc).splitlines()[0]}", key="train.verl") from None
    finally:
        GlobalHydra.instance().clear()


def validate(config: Any) -> None:
    """verl's own validation (`verl.utils.config.validate_config`), as `main_ppo` runs it."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    try:
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(None, f"verl's config validation failed: {exc}", key="train.verl") from None


def flatten_yaml(config: Any) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(config, resolve=False)


REFERENCE = Path("infra") / "verl" / "ppo_orchestra.yaml"
"""The reference copy of the composed config, committed for review (relative to the workspace)."""
REGENERATE = f"orchestra train --backend verl --reference {REFERENCE.as_posix()}"


def reference_yaml(s: VerlSettings, *, clip: float, min_std: float,
                   dead_band: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """The committed reference (`REFERENCE`): the config composed from `s`, with the run's files
    named relative to the workspace (`.orchestra/verl/<experiment>/`, where a dry run writes them)
    and `ray_address=auto`, under a header that lists the overrides. Deterministic: a test compares
    it with the committed copy."""
    from importlib.metadata import version

    folder = Path(".orchestra") / "verl" / s.experiment_name
    files = VerlFiles(train=folder / "train.parquet", val=folder / "val.parquet", tool_config=folder / "tools.yaml",
                      agent_loops=folder / "agent_loops.yaml", checkpoints=folder / "checkpoints")
    hydra_overrides = overrides(s, files, clip=clip, min_std=min_std, dead_band=dead_band, ray_address="auto")
    composed = compose(hydra_overrides)
    validate(composed)
    header = [
        f"# verl {version('verl')} `ppo_trainer` config composed by toolorchestra from params.yaml's train.verl",
        "# (its defaults are the paper's setting). Generated for reference by toolorchestra.rl.verl.compose;",
        f"# do not edit: regenerate with `{REGENERATE}`.",
        "# Hydra overrides used:",
        *(f"#   {o}" for o in hydra_overrides),
    ]
    return "\n".join(header) + "\n" + flatten_yaml(composed)


def command(hydra_overrides: list[str], *, submit: str = "direct", ray_address: str | None = None,
            working_dir: str | None = None) -> list[str]:
    """The command line that launches training (direct `python -m`, or `ray job submit`)."""
    run = [sys.executable if submit == "direct" else "python", "-m", "verl.trainer.main_ppo", *hydra_overrides]
    if submit == "direct":
        return run
    job = ["ray", "job", "submit"]
    if ray_address:
        job += ["--address", ray_address]
    if working_dir:
        job += ["--working-dir", working_dir]
    return [*job, "--", *run]
