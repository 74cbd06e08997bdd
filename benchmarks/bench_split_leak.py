"""Train/eval leak of the task split: held-out tool-use tasks that share a family or a golden-action
prefix with a training task, with the default parameters.

    python benchmarks/bench_split_leak.py [--params params.yaml] [--json]

Synthesizes the `synthesize` section's domains in memory (no files), keeps the tasks the
`validate` stage's filters keep (the Great Expectations suites are skipped: they drop nothing),
and splits them as the `preferences` stage does (`split_tasks` with the assembly's
`eval_task_fraction` and the base seed). A held-out task *shares a golden-action prefix* with a
training task of its domain when one's golden actions (name and arguments) start the other's. It
prints the counts; the last line is one JSON object with `--json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.envs.task import Task
from toolorchestra.episodes.pool import DomainRef, TaskPool, ToolUseTask
from toolorchestra.preferences.assemble import split_tasks
from toolorchestra.synthesis.build import synthesize_domain
from toolorchestra.synthesis.domains import load_embedded
from toolorchestra.synthesis.filters import filter_tasks


def default_pool(params: dict[str, Any]) -> TaskPool:
    """The validated tool-use tasks of the `synthesize` / `validate` sections (in memory)."""
    synth, validate = params["synthesize"], params.get("validate", {})
    seed = params.get("base", {}).get("seed", 0)
    tasks: list[ToolUseTask] = []
    for name in synth["domains"]:
        domain = load_embedded(name, seed=seed, size=synth["db_size"])
        result = synthesize_domain(domain, tasks=synth["tasks_per_domain"], seed=seed,
                                   evolve_fraction=synth["evolve_fraction"])
        kept = filter_tasks(result.tasks, DomainEnv(domain)).kept
        lo, hi = validate.get("min_actions", 1), validate.get("max_actions", 30)
        ref = DomainRef(name=name, folder=Path("."))
        ref.__dict__["domain"] = domain  # the cached_property's slot: the in-memory domain, no folder
        tasks.extend(ToolUseTask(task=t, domain=ref) for t in kept if lo <= len(t.actions) <= hi)
    return TaskPool(qa=[], tool_use=tasks)


def _calls(task: Task) -> list[str]:
    return [json.dumps([a.name, a.arguments], sort_keys=True, default=str) for a in task.actions]


def shares_prefix(a: Task, b: Task) -> bool:
    x, y = _calls(a), _calls(b)
    n = min(len(x), len(y))
    return n > 0 and x[:n] == y[:n]


def leak(params: dict[str, Any]) -> dict[str, float]:
    pool = default_pool(params)
    fraction = params["preferences"]["assembly"]["eval_task_fraction"]
    train, held = split_tasks(pool, fraction, params.get("base", {}).get("seed", 0))
    train_families = {(t.domain.name, t.task.family) for t in train}
    family = [t for t in held if (t.domain.name, t.task.family) in train_families]
    prefix = [h for h in held if any(t.domain.name == h.domain.name and shares_prefix(h.task, t.task) for t in train)]
    return {"tool_use_tasks": float(len(pool.tool_use)), "heldout_tool_use": float(len(held)),
            "heldout_sharing_family": float(len(family)), "heldout_sharing_prefix": float(len(prefix))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = leak(yaml.safe_load(Path(args.params).read_text(encoding="utf-8")))
    print(f"held-out tool-use tasks: {figures['heldout_tool_use']:.0f} of {figures['tool_use_tasks']:.0f}")
    print(f"  sharing a family with a training task:        {figures['heldout_sharing_family']:.0f}")
    print(f"  sharing a golden-action prefix with one:      {figures['heldout_sharing_prefix']:.0f}")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
