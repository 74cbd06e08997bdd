"""One training run with the TRL backend: SFT warm start -> GRPO -> checkpoint.

`train_trl(config, instances, ...)` is what the `train` stage and `orchestra train --backend trl`
call. Phases, each resumable:

1. **warm start** (optional, on by default): SFTTrainer on the golden trajectories of the training
   tasks; the result is saved in the run's work folder and reused if the run restarts;
2. **GRPO**: TRL's GRPOTrainer (`trl_backend`) from the warm-started model; a trainer checkpoint
   every `grpo.save_steps` in the work folder, and a restarted run continues from the last one;
3. **choice** (`select`): the warm start and GRPO's policy run the validation split greedily, and
   GRPO's is exported unless it solved fewer of those tasks (`rl.select`);
4. **export**: the chosen policy, tokenizer, chat template, catalog and manifest into the output
   folder (`checkpoint.save_checkpoint`); the work folder is then removed.

The same code runs on CPU (fp32 weights; bf16 autocast where the CPU has bf16 instructions) and on
one CUDA GPU (bf16); `mixed_precision` chooses.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolorchestra.agent.loop import SYSTEM_PROMPT
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_text
from toolorchestra.core.settings import Settings
from toolorchestra.episodes.environment import RolloutEnvironment
from toolorchestra.episodes.instance import DomainLocator, Instance
from toolorchestra.episodes.pool import fits_actions
from toolorchestra.rl.checkpoint import checkpoint_step, last_checkpoint, run_key, save_checkpoint
from toolorchestra.rl.config import TrainConfig
from toolorchestra.tools.catalog import Catalog

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    checkpoint: Path
    metrics: dict[str, float]
    resumed_from_step: int | None = None
    history: list[dict[str, float]] = field(default_factory=list)


def resolve_model_folder(name: str, settings: Settings) -> Path:
    """`smollm2-135m-instruct` (converted once from the packaged GGUF) or a model folder."""
    from toolorchestra.llm import smollm2

    if name == smollm2.NAME:
        return smollm2.ensure_converted(settings.models_cache)
    folder = Path(name).expanduser()
    if not folder.is_absolute():
        folder = settings.workspace / folder
    if not (folder / "config.json").is_file():
        raise ConfigError(folder, "not a transformers model folder (no config.json)", key="base_model")
    return folder


def fits_episode(config: TrainConfig, instance: Instance) -> bool:
    """Whether an instance is short enough to train whole: any QA item, or a tool-use task of at
    most `data.max_actions` golden calls (all of them when that is unset)."""
    return instance.kind != "tool_use" or fits_actions(instance.tau2_task, config.data.max_actions)


def playable(config: TrainConfig, instances: list[Instance], cap: int | None) -> list[Instance]:
    """The instances of this run's kinds short enough to play whole (`fits_episode`), then a seeded
    sample of `cap` when there are more."""
    import random

    kept = [i for i in instances if i.kind in config.data.kinds and fits_episode(config, i)]
    if cap is not None and len(kept) > cap:
        kept = sorted(random.Random(config.seed).sample(kept, cap), key=lambda i: i.id)
    return kept


def select_instances(config: TrainConfig, instances: list[Instance]) -> list[Instance]:
    """The instances this run trains on: by kind, golden-call count, then a seeded cap."""
    kept = playable(config, instances, config.data.max_instances)
    if not kept:
        raise ConfigError(None, f"no training instances left after filtering (kinds={config.data.kinds}, "
                          f"max_actions={config.data.max_actions}); loosen train.data", key="train.data")
    return kept


def validation_instances(config: TrainConfig, validation: list[Instance]) -> list[Instance]:
    """The validation instances the checkpoint choice runs: filtered as the training ones are, then
    capped by `select.max_instances`."""
    return playable(config, validation, config.select.max_instances)


def first_call_pool(config: TrainConfig, instances: list[Instance]) -> list[Instance]:
    """The tool-use instances too long to train whole (more than `data.max_actions` golden calls),
    whose first golden calls the warm start may learn (`sft.first_calls`); none when that is 0."""
    if not config.sft.first_calls or "tool_use" not in config.data.kinds or config.data.max_actions is None:
        return []
    return [i for i in instances if i.kind == "tool_use" and not fits_episode(config, i)]


def work_folder(config: TrainConfig, instances: list[Instance], catalog: Catalog, settings: Settings) -> Path:
    """Where this run's resumable state lives: keyed by everything but the run's length."""
    # Engines change how fast samples come, not what is learned: a run may switch and resume.
    fixed = config.model_dump(mode="json", exclude={"resume", "log_checkpoint_artifact", "verl", "engine"})
    for key in ("steps", "rollout_engine", "rollout_weights", "rollout_threads"):
        fixed["grpo"].pop(key, None)
    key = run_key(fixed, sorted(i.id for i in instances), catalog.to_dict())
    return settings.state / "train" / key


def _device(config: TrainConfig) -> str:
    from toolorchestra.llm.local import resolve_device

    return resolve_device(config.device)


def use_bf16(config: TrainConfig, device: str) -> bool:
    """Whether this run computes in bf16 (`mixed_precision`; see TrainConfig)."""
    if config.mixed_precision != "auto":
        return config.mixed_precision == "bf16"
    if device.startswith("cuda"):
        return True
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def _load_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"  # GRPO generation and TRL's prompt padding need it
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not tokenizer.chat_template:
        raise ConfigError(folder, "the tokenizer has no chat template; give it one with a tools branch")
    return tokenizer


def warm_start(config: TrainConfig, env: RolloutEnvironment, instances: list[Instance], start: Path,
               work: Path, *, use_cpu: bool, bf16: bool,
               first_calls_from: list[Instance] | None = None) -> tuple[Path, dict[str, float]]:
    """SFT on golden trajectories (and first calls of `first_calls_from`, see `first_call_pool`);
    returns the folder of the warm-started model (reused if done)."""
    import torch
    from transformers import AutoModelForCausalLM

    from toolorchestra.rl.sft import golden_examples, run_sft, sft_trainer
    from toolorchestra.rl.tracking import StepMetrics

    done = work / "sft" / "model"
    if (done / ".complete").is_file():
        log.info("warm start already done in %s", done)
        return done, {}
    tokenizer = _load_tokenizer(start)
    examples = golden_examples(env, instances, tokenizer, config.sft, seed=config.seed,
                               first_call_pool=first_calls_from)
    if not examples:
        raise ConfigError(None, "the warm start found no golden trajectory to train on (no tool-use task, QA "
                          "calculation or lookup replays correctly within "
                          f"sft.max_length={config.sft.max_length}); include such instances, raise "
                          "sft.max_length, or set sft.enabled: false", key="train.sft")
    dtype = torch.float32 if use_cpu or not bf16 else torch.bfloat16  # on CPU bf16 means autocast
    model = AutoModelForCausalLM.from_pretrained(start, dtype=dtype)
    tracker = StepMetrics("sft/")
    metrics = run_sft(sft_trainer(model, tokenizer, examples, config.sft, work / "sft" / "trainer", seed=config.seed,
                                  use_cpu=use_cpu, bf16=bf16, callbacks=[tracker]))
    metrics["sft/examples"] = float(len(examples))
    losses = [row["loss"] for row in tracker.history if "loss" in row]
    if losses:
        metrics["sft/first_loss"], metrics["sft/final_loss"] = losses[0], losses[-1]
    tmp = work / "sft" / ".model.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    atomic_write_text(tmp / ".complete", "sft\n")
    shutil.rmtree(done, ignore_errors=True)
    tmp.rename(done)
    return done, metrics


def summarize(history: list[dict[str, float]]) -> dict[str, float]:
    """Stage metrics from the per-step GRPO logs: last values and means of the key series."""
    steps = [h for h in history if "loss" in h and "orchestra/reward_mean" in h]
    if not steps:
        return {}
    out: dict[str, float] = {"grpo/steps": float(len(steps))}
    for key in ("orchestra/reward_mean", "orchestra/accuracy", "orchestra/format_valid_rate",
                "orchestra/frac_reward_zero_std", "orchestra/groups_filtered", "orchestra/groups_refilled",
                "orchestra/completions_masked", "orchestra/cost_mean",
                "orchestra/latency_mean", "orchestra/rollout_s", "step_time", "tokens_per_s"):
        values = [h[key] for h in steps if key in h]
        if values:
            name = key.replace("orchestra/", "")
            out[f"grpo/{name}_mean"] = statistics.fmean(values)
            out[f"grpo/{name}_last"] = values[-1]
    out["grpo/loss_last"] = steps[-1]["loss"]
    if "kl" in steps[-1]:
        out["grpo/kl_last"] = steps[-1]["kl"]
    return out


def served_environment(env: RolloutEnvironment, catalog: Catalog) -> RolloutEnvironment:
    """The environment the exported policy will meet: the catalog's own code-interpreter shortcut,
    which the rollouts may override (`episode.final_answer_line`; `env.catalog` then carries the
    override, hence `catalog` as given); the choice judges policies there."""
    if env.config.final_answer_line is None:
        return env
    return RolloutEnvironment(catalog, env.settings, env.domains,
                              env.config.model_copy(update={"final_answer_line": None}), llm_for=env.llm_for)


def choose_policy(config: TrainConfig, env: RolloutEnvironment, grpo_model: Any, tokenizer: Any, warm_folder: Path,
                  validation: list[Instance], work: Path) -> Any:
    """GRPO's policy or the warm start (`rl.select`), or None when there is nothing to choose on."""
    from transformers import AutoModelForCausalLM

    from toolorchestra.rl.select import choose, solved

    kept = validation_instances(config, validation)
    if not config.select.enabled or not kept:
        if config.select.enabled:
            log.warning("no validation instances: GRPO's policy is exported without a check against its warm start "
                        "(give the preferences stage a validation_task_fraction)")
        return None
    started = time.perf_counter()
    # On the GRPO model's device: the transformers engine generates with the model where it is.
    warm = AutoModelForCausalLM.from_pretrained(warm_folder).to(next(grpo_model.parameters()).device)
    runs = {name: solved(env, m, tokenizer, kept, grpo=config.grpo, model_folder=warm_folder,
                         scratch=work / "select", name=name)
            for name, m in (("warm_start", warm), ("grpo", grpo_model))}
    del warm
    selection = dataclasses.replace(choose(runs["warm_start"], runs["grpo"], config.select),
                                    seconds=time.perf_counter() - started)
    log.info("checkpoint choice (%.0f s): %s", selection.seconds, selection.reason)
    return selection


def train_trl(
    config: TrainConfig,
    instances: list[Instance],
    *,
    catalog: Catalog,
    settings: Settings,
    domains: DomainLocator,
    out_dir: Path,
    warm_start_dir: Path | None = None,
    validation: list[Instance] | None = None,
    llm_for: Any = None,
    callbacks: list[Any] | None = None,
) -> TrainResult:
    """Warm start, GRPO and export (see the module docstring); `out_dir` receives the checkpoint,
    `warm_start_dir` (optional) the SFT-only one, the baseline that shows what GRPO adds.
    `validation` (optional): the instances `select` chooses between the two policies on."""
    from toolorchestra.rl.tracking import StepMetrics
    from toolorchestra.rl.trl_backend import build_grpo_trainer

    started = time.perf_counter()
    long_tasks = first_call_pool(config, instances)
    instances = select_instances(config, instances)
    device = _device(config)
    use_cpu = not device.startswith("cuda")
    bf16 = use_bf16(config, device)
    base = resolve_model_folder(config.init_from or config.base_model, settings)
    if llm_for is None and config.engine is not None:
        from toolorchestra.llm.config import catalog_llms

        llm_for = catalog_llms(catalog.models, config.engine, settings)
    env = RolloutEnvironment(catalog, settings, domains, config.episode, llm_for=llm_for)
    work = work_folder(config, instances + long_tasks, catalog, settings)
    work.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, float] = {"instances": float(len(instances))}
    start = base
    if config.sft.enabled:
        start, sft_metrics = warm_start(config, env, instances, base, work, use_cpu=use_cpu, bf16=bf16,
                                        first_calls_from=long_tasks)
        metrics.update(sft_metrics)
    tokenizer = _load_tokenizer(start)
    manifest = {
        "name": "orchestrator", "base_model": config.base_model, "init_from": config.init_from, "backend": "trl",
        "episode": config.episode.model_dump(mode="json"), "system_prompt": SYSTEM_PROMPT,
        "policy_alias": config.episode.policy_alias or catalog.policy, "instances": len(instances),
    }
    if warm_start_dir is not None:
        from transformers import AutoModelForCausalLM

        sft_model = AutoModelForCausalLM.from_pretrained(start)
        save_checkpoint(sft_model, tokenizer, warm_start_dir, catalog=catalog, manifest={
            **manifest, "name": "orchestrator-sft", "stage": "sft",
            "steps": {"sft": config.sft.steps if config.sft.enabled else 0, "grpo": 0},
            "metrics": {k: v for k, v in metrics.items() if k.startswith("sft/")}})
        del sft_model
    tracker = StepMetrics("grpo/")
    trainer = build_grpo_trainer(start, tokenizer, env, instances, config.grpo, work / "grpo", use_cpu=use_cpu,
                                 bf16=bf16, seed=config.seed, callbacks=[tracker, *(callbacks or [])])
    resume = last_checkpoint(work / "grpo") if config.resume else None
    resumed_step = checkpoint_step(resume) if resume is not None else None
    if resume is not None:
        log.info("resuming GRPO from %s (step %s)", resume, resumed_step)
    trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    metrics.update(summarize(tracker.history))
    metrics["grpo/global_step"] = float(trainer.state.global_step)
    if resumed_step is not None:
        metrics["grpo/resumed_from_step"] = float(resumed_step)
    model = trainer.accelerator.unwrap_model(trainer.model)
    steps = {"sft": config.sft.steps if config.sft.enabled else 0, "grpo": trainer.state.global_step}
    selection = (choose_policy(config, served_environment(env, catalog), model, tokenizer, start,
                               validation or [], work) if config.sft.enabled else None)
    if selection is not None:
        metrics.update(selection.metrics())
        manifest["selection"] = selection.to_dict()
        if selection.chosen == "warm_start":
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(start)
            steps = {**steps, "grpo": 0, "grpo_run": trainer.state.global_step}
    manifest.update(steps=steps, metrics=dict(metrics))
    save_checkpoint(model, tokenizer, out_dir, catalog=catalog, manifest=manifest)
    shutil.rmtree(work, ignore_errors=True)  # finished: nothing left to resume
    metrics["train_seconds"] = time.perf_counter() - started
    return TrainResult(checkpoint=out_dir, metrics=metrics, resumed_from_step=resumed_step, history=tracker.history)
