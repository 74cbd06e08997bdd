"""Which policy a training run exports: GRPO's, or its warm start when GRPO's does worse on the
validation split.

Why: one GRPO step of 8 x 4 rollouts moves the policy by a draw (against its warm start on the
test tasks: 5 to 0, 7 to 1, 3 to 13, 4 to 12 on the recorded demos), and a first candidate the
promotion gate refused left no champion at all while its warm start was the better model.
Choosing on the test tasks would make the reported figures a selection's; the validation split
(training-domain tasks carved out of the training set by the preferences stage, neither trained
nor tested on) is what the choice may read.

Both policies run the validation tasks greedily (temperature 0), in lockstep, through the
training environment as the exported policy will be served (the catalog's own code-interpreter
shortcut, which rollouts turn off: a program's printed value ends the episode, as at evaluation;
`rl.train.served_environment`) and the rollout engine (`grpo.rollout_engine`: llama.cpp exports the weights
to GGUF once a policy; transformers generates with the model itself); an episode is solved when
the environment's judgement says so. GRPO's policy is kept unless it solves more than
`select.max_drop` fewer tasks than the warm start; ties keep GRPO's (its reward also weighed cost
and latency).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from toolorchestra.episodes.environment import RolloutEnvironment
from toolorchestra.episodes.instance import Instance
from toolorchestra.rl.config import GRPOSettings, SelectSettings

log = logging.getLogger(__name__)

Choice = Literal["grpo", "warm_start"]


@dataclass(frozen=True)
class Selection:
    """The choice and what it rests on (saved in the checkpoint's manifest)."""

    chosen: Choice
    n: int
    warm_start_solved: int
    grpo_solved: int
    grpo_only: int
    """validation tasks GRPO's policy solved and the warm start did not"""
    warm_start_only: int
    reason: str
    seconds: float = 0.0

    def metrics(self) -> dict[str, float]:
        return {"select/n": float(self.n), "select/warm_start_solved": float(self.warm_start_solved),
                "select/grpo_solved": float(self.grpo_solved), "select/grpo_only": float(self.grpo_only),
                "select/warm_start_only": float(self.warm_start_only),
                "select/chose_grpo": float(self.chosen == "grpo"), "select/seconds": self.seconds}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def choose(warm_start: list[bool], grpo: list[bool], settings: SelectSettings) -> Selection:
    """The choice from per-task outcomes of the two policies on the same validation tasks."""
    if len(warm_start) != len(grpo):
        raise ValueError(f"outcomes of different task lists: {len(warm_start)} vs {len(grpo)}")
    w, g = sum(warm_start), sum(grpo)
    g_only = sum(b and not a for a, b in zip(warm_start, grpo, strict=True))
    w_only = sum(a and not b for a, b in zip(warm_start, grpo, strict=True))
    n = len(grpo)
    if g >= w - settings.max_drop:
        chosen: Choice = "grpo"
        reason = f"GRPO's policy solved {g}/{n} validation tasks, the warm start {w}/{n} (max_drop {settings.max_drop})"
    else:
        chosen = "warm_start"
        reason = (f"GRPO's policy solved {g}/{n} validation tasks, fewer than the warm start's {w}/{n} "
                  f"by more than max_drop {settings.max_drop}: the warm start is exported")
    return Selection(chosen=chosen, n=n, warm_start_solved=w, grpo_solved=g, grpo_only=g_only,
                     warm_start_only=w_only, reason=reason)


def exported(selection: Mapping[str, Any]) -> str:
    """Which policy a manifest's `selection` exported, in words (the model card, the evaluation's notes)."""
    return "GRPO's policy" if selection["chosen"] == "grpo" else "the SFT warm start's policy"


def solved(env: RolloutEnvironment, model: Any, tokenizer: Any, instances: list[Instance], *,
           grpo: GRPOSettings, model_folder: Path, scratch: Path, name: str) -> list[bool]:
    """Greedy episodes of `model` on `instances`: whether each was solved. `model_folder` holds the
    architecture's config (the GGUF export reads it); `scratch` receives the export."""
    from toolorchestra.rl.transcript import RolloutPolicy

    if grpo.rollout_engine == "llamacpp":
        from toolorchestra.rl.llamacpp_rollouts import LlamaCppRollouts

        engine = LlamaCppRollouts(model_folder, scratch, weights=grpo.rollout_weights, n_threads=grpo.rollout_threads)
        try:
            rollouts = env.run(engine(model, tokenizer, name=name), instances, temperature=0.0)
        finally:
            engine.close()
    else:  # transformers (and vllm's trainer-bound engine, which only a GRPO step drives): the model itself
        rollouts = env.run(RolloutPolicy(model, tokenizer, name=name), instances, temperature=0.0)
    return [r.correct for r in rollouts]
