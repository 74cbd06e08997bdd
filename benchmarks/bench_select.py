"""The train stage's checkpoint choice, timed: its greedy validation episodes in the rollouts'
environment (the code interpreter's shortcut off, as the choice ran before 9c222d6) against the
environment the exported policy is served in (the catalog's own shortcut, as it runs now), for each
checkpoint, in the same run.

    python benchmarks/bench_select.py [--models models/warm_start models/orchestrator] [--json]

Reads the flow's data and checkpoints (run `orchestra run` first, in the folder this runs from):
`params.yaml`'s train section, its dataset's `validation` split (filtered and capped as the choice
does, `rl.train.validation_instances`) and the rollout engine the choice uses (`train.grpo`:
llama.cpp, one GGUF export a checkpoint). Prints each checkpoint's seconds and solved count per
arm, the episodes whose outcome differs between the arms, and the ratio of the summed seconds;
with `--json` the last line is one JSON object (`seconds_old`, `seconds_new`, `speedup`,
`solved`, `outcome_differences`).

Why it exists: the choice's 58 episodes took 263 s of a 43-minute demo (2026-12-07, an AVX512
EPYC); a program's printed value now ends the episode there, as at evaluation and `ask`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def choice_inputs(workspace: Path) -> tuple[Any, Any, Any, list[Any]]:
    """(train config, settings, rollouts' environment, validation instances) as the train stage builds them."""
    from pipelines.train import Params, load_inputs, train_config
    from toolorchestra.core.settings import load_settings
    from toolorchestra.core.yaml_strict import strict_load
    from toolorchestra.episodes.environment import RolloutEnvironment
    from toolorchestra.rl.train import validation_instances

    settings = load_settings(workspace=workspace)
    raw = strict_load((workspace / "params.yaml").read_text())
    config = train_config(Params.model_validate({**raw["train"], "seed": raw.get("base", {}).get("seed", 0)}))
    deps = {name: workspace / path for name, path in raw["train"]["deps"].items()}
    catalog, _, domains, validation = load_inputs(config, deps)
    llm_for = None
    if config.engine is not None:
        from toolorchestra.llm.config import catalog_llms

        llm_for = catalog_llms(catalog.models, config.engine, settings)
    env = RolloutEnvironment(catalog, settings, domains, config.episode, llm_for=llm_for)
    return config, catalog, env, validation_instances(config, validation)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", type=Path, default=[Path("models/warm_start"), Path("models/orchestrator")])
    parser.add_argument("--scratch", type=Path, default=Path(".orchestra/bench_select"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolorchestra.rl.select import solved
    from toolorchestra.rl.train import served_environment

    workspace = Path.cwd()
    config, catalog, rollout_env, items = choice_inputs(workspace)
    if not items:
        parser.error("the dataset has no validation instances (run the preferences stage with a validation_task_fraction)")
    arms = {"old": rollout_env, "new": served_environment(rollout_env, catalog)}
    if arms["new"] is rollout_env:
        print("note: train.episode.final_answer_line is unset: both arms run the same environment")
    seconds = {"old": 0.0, "new": 0.0}
    solved_counts: dict[str, dict[str, int]] = {}
    differences: list[dict[str, Any]] = []
    for folder in args.models:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
        outcomes: dict[str, list[bool]] = {}
        for arm, env in arms.items():
            started = time.perf_counter()
            outcomes[arm] = solved(env, model, tokenizer, items, grpo=config.grpo, model_folder=folder,
                                   scratch=args.scratch, name=folder.name)
            took = time.perf_counter() - started
            seconds[arm] += took
            print(f"{folder}: {arm} arm {took:.1f} s, solved {sum(outcomes[arm])}/{len(items)}", flush=True)
        solved_counts[str(folder)] = {arm: sum(v) for arm, v in outcomes.items()}
        differences += [{"model": str(folder), "task": item.task_id, "old": a, "new": b}
                        for item, a, b in zip(items, outcomes["old"], outcomes["new"], strict=True) if a != b]
    speedup = seconds["old"] / seconds["new"] if seconds["new"] else float("nan")
    print(f"{len(items)} validation items x {len(args.models)} checkpoint(s): {seconds['old']:.1f} s -> "
          f"{seconds['new']:.1f} s (x{speedup:.2f}); outcomes differ on {len(differences)} episode(s)")
    if args.json:
        print(json.dumps({"items": len(items), "checkpoints": [str(m) for m in args.models],
                          "seconds_old": round(seconds["old"], 2), "seconds_new": round(seconds["new"], 2),
                          "speedup": round(speedup, 3), "solved": solved_counts, "outcome_differences": differences}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
