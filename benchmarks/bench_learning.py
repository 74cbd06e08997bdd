"""Learning benchmark: is RL doing the work? SFT + GRPO against SFT only, a trained embedding router,
heuristic routers and the prompted base model, on domains training never saw (issue 14).

    python benchmarks/bench_learning.py [--quick] [--json] [--out reports/bench_learning]
        [--model smollm2-135m-instruct] [--expert-model FOLDER] [--tasks data/validated]
        [--train-domains library,clinic,telecom] [--unseen-domains movie,restaurant] [--tracking-uri URI]

1. **Data, split by domain**: tool-use tasks (at most `--max-actions` golden calls) and QA items
   synthesized here from the training domains (the embedded library / clinic / telecom, plus any
   vendored `third_party/toolscale/<name>` named in `--train-domains`) and from the unseen domains
   (vendored databases, default movie and restaurant), or read from `--tasks`. Every task of an
   unseen domain is held out (`preferences.assemble.split_tasks`' `heldout_domains`); of the
   training domains a seeded `--eval-fraction` of tasks is held out. Training preferences are the
   grammar pairs of `--train-preference-kinds`; the preference benchmark uses other kinds only.
2. **Training** (`rl.train.train_trl`, the train stage's code path): an SFT warm start on the
   golden trajectories (saved as the SFT-only arm), then GRPO from it with the composite reward
   (the SFT + GRPO arm); a second GRPO seed starts from the same SFT checkpoint.
3. **Evaluation** (`evaluation.runner.evaluate`, the evaluate stage's machinery): every arm on the
   identical task list, catalog (code interpreter, local search over the domains' records, two
   SmolLM2 experts), prices and greedy decoding; benchmarks `tool_use_in_domain`,
   `tool_use_unseen`, `qa_in_domain`, `qa_unseen` and `preferences` (held-out kinds, instructed vs
   neutral runs). Arms: `prompted` (base model), `sft_only`, `sft_grpo`, `sft_grpo_seed1`,
   `random_router`, `always_strongest`, `cascade` (`evaluation.methods`) and `embedding_router`
   (`evaluation.router`: logistic regression over MiniLM embeddings of the training tasks' text,
   labelled with the handler that solves each by its golden trajectory: domain tools and lookups
   -> the SFT orchestrator, arithmetic -> the program expert, other QA -> the cheapest expert).

Figures per arm (`results.json`, the last stdout line with `--json`): accuracy with its 95% Wilson
interval, mean cost and latency, overall and for `in_domain` and `unseen_domains` (pooled tool use
and QA), accuracy at each cost budget (an episode over budget counts as failed), per-tool and
per-model call shares, format-valid rate, preference adherence (with interval, by kind); the GRPO
arms add per-step reward mean / spread, `frac_reward_zero_std` and the filtered-group share. Also
`report.md`, `cost_accuracy.png` (Pareto frontier, `evaluation.report`), `accuracy_budget.png`,
and MLflow: a parent run with one nested run per arm (`--tracking-uri`, default sqlite under
`--out`).

Sizes: `--quick` is a smoke run (the test, a tiny model); the CPU defaults (24 tasks + 8 QA per
domain, 10 + 10 tool-use and 6 + 6 QA held-out items, 4 preference items; SFT 12 x 4, GRPO 3
steps x 8 tasks x 4 rollouts, as the demo's train stage steps, two GRPO seeds; at most 3 turns of
48 tokens, 3 domain tools offered) have not completed a run yet. The README's figures (2026-12-01,
41.7 min on two cores shared with test runs, 34 items, 38 episodes per arm) are of the sizes
before: `--sft-batch 2 --grpo-steps 6 --prompts-per-step 1`, one task per GRPO step, so GRPO saw
three groups with reward spread in all. With CUDA the GPU defaults are larger. Every size has a
flag.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
THIRD_PARTY = REPO / "third_party" / "toolscale"
ARMS = ("prompted", "sft_only", "sft_grpo", "sft_grpo_seed1", "random_router", "always_strongest", "cascade",
        "embedding_router")
GRPO_KEYS = ("reward_mean", "reward_std", "frac_reward_zero_std", "groups_filtered", "accuracy",
             "format_valid_rate")
FIGURES = ("accuracy", "ci_low", "ci_high", "cost_mean", "latency_mean", "format_valid_rate", "n")


def synthesize(root: Path, *, tasks: int, seed: int) -> Path:
    """Easy tool-use tasks (no QA) of the embedded domains under `root/toolscale/` (also used by
    bench_train_gpu.py and bench_rollouts.py)."""
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import embedded_names, load_embedded
    from toolorchestra.synthesis.procedural import ProceduralConfig

    easy = ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0, read_only_fraction=0.3)
    for name in embedded_names():
        result = synthesize_domain(load_embedded(name, seed=seed, size=30), tasks=tasks, seed=seed, qa=0,
                                   evolve_fraction=0.0, config=easy)
        write_domain_folder(root / "toolscale" / name, result)
    return root


def tool_use_setup(prefix: str, *, tasks: int, max_turns: int, max_tokens: int, model: Path | None) -> Any:
    """The rollout setting of bench_train_gpu.py and bench_rollouts.py: a scratch workspace,
    `synthesize`d tasks, tool-use training instances over the domain tools only (no catalog
    tools) and their environment. Returns (model folder, instances, environment, scratch folder)."""
    import tempfile

    from toolorchestra.core.settings import Settings
    from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.llm.smollm2 import ensure_converted
    from toolorchestra.preferences.assemble import build_instances
    from toolorchestra.tools.catalog import load_embedded_catalog

    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    settings = Settings(workspace=REPO, state_dir=scratch / "state")
    model_dir = model or ensure_converted(Settings(workspace=REPO).models_cache)
    root = synthesize(scratch / "validated", tasks=tasks, seed=0)
    catalog = load_embedded_catalog().subset([])
    instances = [i for i in build_instances(root, catalog, include_policy=False, min_catalog_tools=0,
                                            eval_task_fraction=0.0, seed=0)["train"] if i.kind == "tool_use"]
    env = RolloutEnvironment(catalog, settings, DomainLocator([root]),
                             EpisodeConfig(max_turns=max_turns, max_tokens=max_tokens, max_domain_tools=4))
    return model_dir, instances, env, scratch


# ------------------------------------------------------------------------------ sizes


@dataclass(frozen=True)
class Sizes:
    tasks_per_domain: int
    qa_per_domain: int
    db_size: int
    eval_tool_use: int
    """held-out tool-use tasks per benchmark (in-domain, unseen)"""
    eval_qa: int
    eval_preferences: int
    sft_steps: int
    sft_batch: int
    grpo_steps: int
    prompts_per_step: int
    """GRPO groups per optimisation step (tasks x `generations` rollouts each)"""
    generations: int
    max_turns: int
    max_tokens: int
    max_completion_length: int
    batch_size: int
    second_seed: bool = True


QUICK = Sizes(tasks_per_domain=5, qa_per_domain=4, db_size=8, eval_tool_use=2, eval_qa=2, eval_preferences=2,
              sft_steps=1, sft_batch=2, grpo_steps=1, prompts_per_step=1, generations=2, max_turns=2, max_tokens=8,
              max_completion_length=128, batch_size=8)
CPU = Sizes(tasks_per_domain=24, qa_per_domain=8, db_size=30, eval_tool_use=10, eval_qa=6, eval_preferences=4,
            sft_steps=12, sft_batch=4, grpo_steps=3, prompts_per_step=8, generations=4, max_turns=3, max_tokens=96,
            max_completion_length=768, batch_size=8)
GPU = Sizes(tasks_per_domain=60, qa_per_domain=20, db_size=40, eval_tool_use=40, eval_qa=20, eval_preferences=16,
            sft_steps=60, sft_batch=8, grpo_steps=40, prompts_per_step=16, generations=8, max_turns=4, max_tokens=96,
            max_completion_length=1024, batch_size=32)


def preset(quick: bool) -> Sizes:
    if quick:
        return QUICK
    import torch

    return GPU if torch.cuda.is_available() else CPU


# ------------------------------------------------------------------------------ data


def _load_domain(name: str, *, seed: int, size: int) -> Any:
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.envs.domain import load_domain
    from toolorchestra.synthesis.domains import embedded_names, load_embedded

    if name in embedded_names():
        return load_embedded(name, seed=seed, size=size)
    if (THIRD_PARTY / name / "db.json").is_file():
        return load_domain(THIRD_PARTY / name, name=name)
    vendored = sorted(p.name for p in THIRD_PARTY.iterdir() if (p / "db.json").is_file()) if THIRD_PARTY.is_dir() else []
    raise ConfigError(None, f"unknown domain {name!r}: embedded {embedded_names()}, vendored {vendored}",
                      key="domains")


def synthesize_split(root: Path, domains: list[str], *, tasks: int, qa: int, db_size: int, seed: int) -> Path:
    """Tool-use tasks and QA items (a third of them arithmetic) of every domain, as the synthesize
    stage writes them: `root/toolscale/<domain>/`, `root/qa/<domain>.jsonl`, `root/qa/docs/`."""
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.procedural import ProceduralConfig

    easy = ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0, read_only_fraction=0.3)
    for name in domains:
        result = synthesize_domain(_load_domain(name, seed=seed, size=db_size), tasks=tasks, seed=seed, qa=qa,
                                   evolve_fraction=0.0, arithmetic_fraction=0.34, config=easy)
        write_domain_folder(root / "toolscale" / name, result, qa_file=root / "qa" / f"{name}.jsonl",
                            docs_file=root / "qa" / "docs" / f"{name}.jsonl")
    return root


def check_tasks(root: Path, train: list[str], unseen: list[str]) -> Any:
    """The task pool of `root`, or a ConfigError saying what is missing."""
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.episodes.pool import load_pool

    pool = load_pool(root)
    if not pool.tool_use:
        raise ConfigError(root, "no tool-use tasks here: --tasks needs validated ToolScale folders "
                          "(toolscale/<domain>/tasks.json), e.g. data/validated")
    have = {t.domain.name for t in pool.tool_use}
    missing = sorted(set(train + unseen) - have)
    if missing:
        raise ConfigError(root, f"no tool-use tasks for domains {missing}; the folder has {sorted(have)}")
    overlap = sorted(set(train) & set(unseen))
    if overlap:
        raise ConfigError(None, f"domains {overlap} are both training and unseen", key="domains")
    return pool


def local_catalog(tools: list[str], *, expert_model: str, documents: Path | None) -> Any:
    """The embedded catalog reduced to `tools`, every local model on `expert_model`, local search
    over `documents` (the domains' records) when given."""
    from toolorchestra.tools.catalog import LocalSearchBackend, load_embedded_catalog

    catalog = load_embedded_catalog().subset(tools)
    models = {alias: m.model_copy(update={"backend": m.backend.model_copy(update={"model": expert_model})})
              if m.backend.kind == "local" else m for alias, m in catalog.models.items()}
    entries = [t.model_copy(update={"backend": t.backend.model_copy(update={"documents": str(documents)})})
               if isinstance(t.backend, LocalSearchBackend) and documents is not None and documents.is_dir() else t
               for t in catalog.tools]
    return catalog.model_copy(update={"models": models, "tools": entries})


def route_label(instance: Any, handlers: dict[str, str]) -> str:
    """The handler that solves a training instance, by its golden trajectory: domain tools and
    lookups need an orchestrator that writes arguments; arithmetic, a program; otherwise an answer."""
    from toolorchestra.episodes.environment import CATEGORY_TOOLS
    from toolorchestra.episodes.pool import QAItem

    if instance.kind == "tool_use":
        return "orchestrator"
    tools = CATEGORY_TOOLS.get(QAItem.model_validate(instance.task).qa_category, ())
    if "code_interpreter" in tools and "program" in handlers:
        return "program"
    if "local_search" in tools:
        return "orchestrator"
    return "answer" if "answer" in handlers else "orchestrator"


# ------------------------------------------------------------------------------ figures


def _figures(m: Any) -> dict[str, Any]:
    return {"n": m.n, "accuracy": m.accuracy, "ci_low": m.accuracy_ci_low, "ci_high": m.accuracy_ci_high,
            "cost_mean": m.cost_mean, "latency_mean": m.latency_mean, "format_valid_rate": m.format_valid_rate}


def budgets(records: list[Any], points: int) -> list[float]:
    """Cost budgets from the cheapest to the dearest episode (geometric), every arm's on one scale."""
    costs = [r.cost_usd for r in records if r.scored and r.cost_usd > 0]
    if not costs:
        return [0.0]
    low, high = min(costs), max(costs)
    if points < 2 or high <= low:
        return [high]
    ratio = (high / low) ** (1 / (points - 1))
    return [low * ratio ** i for i in range(points)]


def accuracy_at(records: list[Any], budget: float) -> float:
    """Share of episodes solved within `budget` USD (one over budget counts as failed)."""
    scored = [r for r in records if r.scored]
    return sum(r.correct and r.cost_usd <= budget * (1 + 1e-9) for r in scored) / len(scored) if scored else 0.0


def grpo_steps(history: list[dict[str, float]]) -> list[dict[str, float]]:
    return [{"step": int(row["step"]), **{k: row[f"orchestra/{k}"] for k in GRPO_KEYS if f"orchestra/{k}" in row}}
            for row in history if "orchestra/reward_mean" in row]


def task_list_sha(keys: list[str]) -> str:
    return hashlib.sha256(json.dumps(keys).encode()).hexdigest()[:16]


def arm_figures(run: Any, groups: dict[str, list[str]], grid: list[float]) -> dict[str, dict[str, Any]]:
    """Every figure per arm (module docstring)."""
    from toolorchestra.evaluation.metrics import summarize, task_lists

    lists = task_lists(run.records)
    out: dict[str, dict[str, Any]] = {}
    for method in run.methods:
        mine = [r for r in run.records if r.method == method.name]
        overall = run.summary[method.name]["overall"]
        arm = {**_figures(overall), "role": method.role, "description": method.description,
               "answered_rate": overall.answered_rate, "tool_share": overall.tool_share,
               "model_share": overall.model_share, "calls_per_task": overall.calls_per_task,
               "adherence": overall.adherence, "adherence_ci_low": overall.adherence_ci_low,
               "adherence_ci_high": overall.adherence_ci_high, "adherence_n": overall.adherence_n,
               "adherence_by_kind": overall.adherence_by_kind,
               "accuracy_at_budget": [accuracy_at(mine, b) for b in grid],
               "benchmarks": {b: _figures(m) for b, m in run.summary[method.name].items() if b != "overall"},
               "seconds": run.seconds.get(method.name), "task_list_sha": task_list_sha(lists[method.name]),
               "tasks": len(lists[method.name])}
        for group, benches in groups.items():
            subset = [r for r in mine if r.benchmark in benches]
            arm[group] = _figures(summarize(subset)[method.name]["overall"]) if subset else None
        out[method.name] = arm
    return out


# ------------------------------------------------------------------------------ outputs


def _pct(p: float | None, low: float | None = None, high: float | None = None) -> str:
    if p is None:
        return "-"
    return f"{100 * p:.1f}%" + (f" [{100 * low:.1f}, {100 * high:.1f}]" if low is not None and high is not None else "")


def markdown(doc: dict[str, Any], run: Any) -> str:
    from toolorchestra.evaluation.report import call_shares_table, markdown_table

    grid = doc["budgets"]
    head = ["arm", "accuracy [95% CI]", "in-domain", "unseen domains", "cost (USD)", "latency (s)", "format valid",
            "adherence", *[f"acc@${b:.2g}" for b in grid]]
    lines = [f"# Learning benchmark ({doc['size']})", "",
             f"Training domains: {', '.join(doc['domains']['train'])}; unseen: {', '.join(doc['domains']['unseen'])}. "
             f"{doc['tasks']} evaluated episodes per arm (identical list, sha {doc['task_list_sha']}); "
             f"wall {doc['seconds']['total']:.0f}s.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, arm in doc["arms"].items():
        cells = [name, _pct(arm["accuracy"], arm["ci_low"], arm["ci_high"])]
        for group in ("in_domain", "unseen_domains"):
            g = arm.get(group)
            cells.append(_pct(g["accuracy"], g["ci_low"], g["ci_high"]) if g else "-")
        cells += [f"{arm['cost_mean']:.2e}", f"{arm['latency_mean']:.2f}", _pct(arm["format_valid_rate"]),
                  _pct(arm["adherence"], arm["adherence_ci_low"], arm["adherence_ci_high"])]
        cells += [_pct(a) for a in arm["accuracy_at_budget"]]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Per benchmark", "", markdown_table(run), "", "## Where the calls went", "",
              call_shares_table(run), ""]
    for name, arm in doc["arms"].items():
        if arm.get("grpo_steps"):
            lines += [f"## GRPO steps of {name}", "", "| step | reward mean | reward spread | zero-spread groups | "
                      "filtered groups | accuracy |", "| --- | --- | --- | --- | --- | --- |"]
            lines += [f"| {s['step']} | {s.get('reward_mean', math.nan):.3f} | {s.get('reward_std', math.nan):.3f} | "
                      f"{s.get('frac_reward_zero_std', math.nan):.2f} | {s.get('groups_filtered', math.nan):.2f} | "
                      f"{s.get('accuracy', math.nan):.2f} |" for s in arm["grpo_steps"]]
            lines.append("")
    return "\n".join(lines)


def budget_plot(doc: dict[str, Any], path: Path) -> Path:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toolorchestra.core.fs import atomic_write_bytes

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name, arm in doc["arms"].items():
        ax.plot(doc["budgets"], arm["accuracy_at_budget"], marker="o", ms=3, label=name)
    grid = [b for b in doc["budgets"] if b > 0]
    if len(grid) > 1 and grid[-1] / grid[0] > 20:
        ax.set_xscale("log")
    ax.set_xlabel("cost budget per task (USD)")
    ax.set_ylabel("accuracy within budget")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("Accuracy vs budget (an episode over budget counts as failed)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())


def _flat(prefix: str, value: Any, out: dict[str, float]) -> dict[str, float]:
    if isinstance(value, bool):
        out[prefix] = float(value)
    elif isinstance(value, int | float) and math.isfinite(value):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for key, inner in value.items():
            _flat(f"{prefix}/{key}" if prefix else str(key), inner, out)
    return out


def log_mlflow(doc: dict[str, Any], out: Path, tracking_uri: str) -> str:
    """A parent run (sizes, files) with one nested run per arm (its figures, GRPO steps by step)."""
    import re

    import mlflow

    def clean(key: str) -> str:
        return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", key)

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment("bench_learning")
    with mlflow.start_run(run_name=f"bench_learning-{doc['size']}") as parent:
        mlflow.log_params({"size": doc["size"], "train_domains": ",".join(doc["domains"]["train"]),
                           "unseen_domains": ",".join(doc["domains"]["unseen"]), "task_list_sha": doc["task_list_sha"],
                           **{f"sizes.{k}": v for k, v in doc["sizes"].items()}})
        mlflow.log_metrics({"seconds_total": doc["seconds"]["total"], "tasks": doc["tasks"]})
        for name in ("results.json", "report.md", "cost_accuracy.png", "accuracy_budget.png"):
            if (out / name).is_file():
                mlflow.log_artifact(str(out / name))
        for name, arm in doc["arms"].items():
            with mlflow.start_run(run_name=name, nested=True):
                mlflow.set_tags({"arm": name, "role": arm["role"], "task_list_sha": arm["task_list_sha"]})
                mlflow.log_param("description", arm["description"][:500])
                figures = {k: v for k, v in arm.items() if k not in ("grpo_steps", "description", "role",
                                                                     "task_list_sha", "accuracy_at_budget")}
                metrics = {clean(k): v for k, v in _flat("", figures, {}).items()}
                metrics.update({f"accuracy_at_budget/{i}": a for i, a in enumerate(arm["accuracy_at_budget"])})
                mlflow.log_metrics(metrics)
                for row in arm.get("grpo_steps") or []:
                    mlflow.log_metrics({f"grpo/{k}": v for k, v in row.items() if k != "step"}, step=row["step"])
        return parent.info.run_id


# ------------------------------------------------------------------------------ the run


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke-size run (the test)")
    parser.add_argument("--json", action="store_true", help="print the results JSON as the last line")
    parser.add_argument("--out", type=Path, help="output folder (default: <workspace>/reports/bench_learning)")
    parser.add_argument("--tasks", type=Path, help="validated task folder (default: synthesized here)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the orchestrator's base model (a folder)")
    parser.add_argument("--expert-model", help="model folder of every catalog expert (default: SmolLM2)")
    parser.add_argument("--train-domains", default="library,clinic,telecom")
    parser.add_argument("--unseen-domains", default="movie,restaurant")
    parser.add_argument("--tools", default="code_interpreter,local_search,ask_direct,ask_program",
                        help="catalog tools every arm is offered")
    parser.add_argument("--train-preference-kinds", default="accuracy,latency,prefer_tool")
    parser.add_argument("--eval-preference-kinds", default="avoid_tool,cost", help="held out: not trained on")
    parser.add_argument("--eval-fraction", type=float, default=0.3, help="held-out share of training-domain tasks")
    parser.add_argument("--max-actions", type=int, default=2)
    parser.add_argument("--budget-points", type=int, default=6)
    parser.add_argument("--sft-lr", type=float, default=1e-4)
    parser.add_argument("--grpo-lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///<out>/mlflow.db)")
    parser.add_argument("--engine", choices=["transformers", "llamacpp"],
                        help="engine of every local model (policies, experts, GRPO rollouts); default: llamacpp "
                             "on a CPU, transformers with CUDA")
    parser.add_argument("--keep-checkpoints", action="store_true")
    for field in Sizes.__dataclass_fields__:
        if field != "second_seed":
            parser.add_argument("--" + field.replace("_", "-"), type=int, help="overrides the preset")
    parser.add_argument("--no-second-seed", action="store_true")
    return parser.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> Sizes:
    base = preset(args.quick)
    changes = {f: getattr(args, f) for f in Sizes.__dataclass_fields__ if getattr(args, f, None) is not None}
    if args.no_second_seed:
        changes["second_seed"] = False
    small = sorted(k for k, v in changes.items() if not isinstance(v, bool) and v < (0 if k == "eval_preferences" else 1))
    if small:
        from toolorchestra.core.errors import ConfigError

        raise ConfigError(None, f"sizes {small} must be at least 1 (eval_preferences: 0 turns it off)", key="sizes")
    if changes.get("generations", base.generations) < 2:
        from toolorchestra.core.errors import ConfigError

        raise ConfigError(None, "--generations must be at least 2 (one GRPO group)", key="sizes")
    return replace(base, **changes)


def run(args: argparse.Namespace, log: Any = print) -> dict[str, Any]:
    from types import SimpleNamespace

    from toolorchestra.core.errors import ConfigError
    from toolorchestra.core.fs import atomic_write_json, atomic_write_text
    from toolorchestra.core.settings import Settings
    from toolorchestra.episodes.environment import EpisodeConfig
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.evaluation.benchmarks import HeldOut, PreferenceSpec, QASpec, ToolScaleSpec, build_benchmarks
    from toolorchestra.evaluation.methods import (
        CANDIDATE,
        FixedRoutePolicy,
        Method,
        MethodsConfig,
        build_methods,
        cascade_order,
        expert_choices,
        orchestrator,
    )
    from toolorchestra.evaluation.metrics import task_lists
    from toolorchestra.evaluation.report import pareto_plot
    from toolorchestra.evaluation.router import EmbeddingRouter, RoutedPolicy
    from toolorchestra.evaluation.runner import EvalConfig, PromptConfig, evaluate
    from toolorchestra.llm.config import as_engine, catalog_llms
    from toolorchestra.llm.smollm2 import NAME, ensure_converted
    from toolorchestra.preferences.assemble import AssemblyConfig, assemble
    from toolorchestra.preferences.grammar import generate_grammar_pairs
    from toolorchestra.rl.checkpoint import load_orchestrator
    from toolorchestra.rl.config import TrainConfig
    from toolorchestra.rl.train import train_trl
    from toolorchestra.tools.embeddings import build_embedder

    started = time.perf_counter()
    sizes = sizes_of(args)
    import torch

    engine = args.engine or ("transformers" if torch.cuda.is_available() else "llamacpp")
    size_name = "quick" if args.quick else ("gpu" if sizes == GPU else "cpu" if sizes == CPU else "custom")
    train_domains = [d for d in args.train_domains.split(",") if d]
    unseen = [d for d in args.unseen_domains.split(",") if d]
    if not train_domains or not unseen:
        raise ConfigError(None, "need at least one training and one unseen domain", key="domains")
    root = Path(os.environ.get("ORCHESTRA_WORKSPACE", REPO))
    out = (args.out or root / "reports" / "bench_learning").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    shutil.rmtree(work, ignore_errors=True)  # checkpoints of an earlier run are not reused
    settings = Settings(workspace=root, state_dir=out / "state")
    shared_cache = Settings(workspace=root).models_cache  # SmolLM2 is converted once for the project
    base = str(ensure_converted(shared_cache)) if args.model == NAME else str(Path(args.model).resolve())
    expert_model = str(Path(args.expert_model).resolve()) if args.expert_model else str(ensure_converted(shared_cache))

    # 1. data
    if args.tasks is not None:
        tasks = args.tasks.resolve()
    else:
        tasks = synthesize_split(out / "validated", train_domains + unseen, tasks=sizes.tasks_per_domain,
                                 qa=sizes.qa_per_domain, db_size=sizes.db_size, seed=args.seed)
    pool = check_tasks(tasks, train_domains, unseen)
    pool = type(pool)(qa=[q for q in pool.qa if _qa_domain(q) in set(train_domains + unseen)],
                      tool_use=[t for t in pool.tool_use if t.domain.name in set(train_domains + unseen)])
    catalog = local_catalog([t for t in args.tools.split(",") if t], expert_model=expert_model,
                            documents=tasks / "qa" / "docs")
    train_kinds = [k for k in args.train_preference_kinds.split(",") if k]
    eval_kinds = [k for k in args.eval_preference_kinds.split(",") if k]
    if set(train_kinds) & set(eval_kinds):
        raise ConfigError(None, f"preference kinds {sorted(set(train_kinds) & set(eval_kinds))} are both trained "
                          "and held out", key="preferences")
    train_pairs, _ = generate_grammar_pairs(catalog, kinds=train_kinds, blocks=1, seed=args.seed) if train_kinds \
        else ([], {})
    eval_pairs, _ = generate_grammar_pairs(catalog, kinds=eval_kinds, blocks=1, seed=args.seed) if eval_kinds \
        else ([], {})
    assembly = AssemblyConfig(eval_task_fraction=args.eval_fraction, heldout_domains=unseen, include_policy=False,
                              price_jitter=1.5, seed=args.seed)
    splits = assemble(pool, catalog, train_pairs, [], assembly)
    train_set = [i for i in splits["train"]
                 if i.kind == "qa" or len(i.tau2_task.actions) <= args.max_actions]
    leaked = sorted({i.domain for i in train_set} & set(unseen))
    if leaked:  # the point of the benchmark: fail loudly rather than report a leaked "unseen" figure
        raise ConfigError(None, f"unseen domains {leaked} reached the training set", key="domains")
    log(f"data: {len(train_set)} training instances from {', '.join(train_domains)}; unseen: {', '.join(unseen)}")

    specs = [ToolScaleSpec(name="tool_use_in_domain", domains=train_domains, max_actions=args.max_actions,
                           max_tasks=sizes.eval_tool_use),
             ToolScaleSpec(name="tool_use_unseen", domains=unseen, max_actions=args.max_actions,
                           max_tasks=sizes.eval_tool_use),
             QASpec(name="qa_in_domain", domains=train_domains, max_tasks=sizes.eval_qa),
             QASpec(name="qa_unseen", domains=unseen, max_tasks=sizes.eval_qa)]
    if eval_pairs and sizes.eval_preferences:
        specs.append(PreferenceSpec(name="preferences", preference_kinds=eval_kinds, max_tasks=sizes.eval_preferences))
    benchmarks = build_benchmarks(specs, tasks_root=tasks, workspace=root, seed=args.seed,
                                  heldout=HeldOut(eval_task_fraction=args.eval_fraction, domains=unseen),
                                  train_ids={i.task_id for i in splits["train"]}, preference_pairs=eval_pairs,
                                  tools=[t.name for t in catalog.tools])
    train_ids = {i.task_id for i in train_set}
    overlap = [i.key for b in benchmarks for i in b.items if i.id in train_ids]
    if overlap:
        raise ConfigError(None, f"held-out items were trained on: {overlap[:3]}", key="benchmarks")

    # 2. training
    llm_for = catalog_llms(catalog.models, engine, settings)

    episode = EpisodeConfig(max_turns=sizes.max_turns, max_tokens=sizes.max_tokens, max_domain_tools=3,
                            max_observation_chars=300)
    config = TrainConfig.model_validate({
        "base_model": base, "seed": args.seed, "device": "auto",
        "data": {"kinds": ["tool_use", "qa"], "max_actions": args.max_actions},
        "episode": episode.model_dump(),
        "sft": {"steps": sizes.sft_steps, "batch_size": sizes.sft_batch, "learning_rate": args.sft_lr,
                "max_examples": 64},
        "grpo": {"steps": sizes.grpo_steps, "num_generations": sizes.generations, "learning_rate": args.grpo_lr,
                 "prompts_per_step": sizes.prompts_per_step,
                 "max_completion_length": sizes.max_completion_length, "save_steps": max(1, sizes.grpo_steps)},
        "log_checkpoint_artifact": False, "engine": engine,
    })
    if engine == "llamacpp":  # the step's rollouts on a GGUF export of the live weights
        config = config.model_copy(update={"grpo": config.grpo.model_copy(update={"rollout_engine": "llamacpp"})})
    domains = DomainLocator([tasks])
    t_train = time.perf_counter()
    log(f"training: SFT {sizes.sft_steps} x {sizes.sft_batch}, GRPO {sizes.grpo_steps} steps x "
        f"{sizes.prompts_per_step} tasks x {sizes.generations} rollouts ...")
    grpo = train_trl(config, train_set, catalog=catalog, settings=settings, domains=domains, out_dir=work / "sft_grpo",
                     warm_start_dir=work / "sft_only", llm_for=llm_for)
    trained = {"sft_grpo": grpo}
    if sizes.second_seed:
        second = config.model_copy(update={"seed": args.seed + 1, "init_from": str(work / "sft_only"),
                                           "sft": config.sft.model_copy(update={"enabled": False})})
        trained["sft_grpo_seed1"] = train_trl(second, train_set, catalog=catalog, settings=settings, domains=domains,
                                              out_dir=work / "sft_grpo_seed1", llm_for=llm_for)
    train_s = time.perf_counter() - t_train
    for name, result in trained.items():
        for step in grpo_steps(result.history):
            log(f"  {name} GRPO step {step['step']}: reward {step.get('reward_mean', math.nan):.3f} "
                f"± {step.get('reward_std', math.nan):.3f}, zero-spread {step.get('frac_reward_zero_std', math.nan):.2f},"
                f" filtered {step.get('groups_filtered', math.nan):.2f}")

    # 3. arms
    grpo_llm, _, manifest = load_orchestrator(work / "sft_grpo")
    grpo_llm = as_engine(grpo_llm, engine, settings)
    candidate = SimpleNamespace(llm=grpo_llm, manifest={**manifest, "base_model": base}, ref="sft_grpo", sha=None)
    methods, _, notes = build_methods(
        MethodsConfig(champion=False, experts=[], sft_only=False), candidate=candidate, champion=None,
        champion_note="", catalog=catalog, settings=settings, llm_for=llm_for, seed=args.seed,
        max_turns=sizes.max_turns, engine=engine)
    by_name: dict[str, Method] = {m.name: m for m in methods}
    by_name["sft_grpo"] = by_name.pop(CANDIDATE)
    by_name["sft_grpo"].name = "sft_grpo"
    by_name["sft_grpo"].description = (f"SFT then GRPO ({sizes.grpo_steps} steps x {sizes.prompts_per_step} tasks x "
                                       f"{sizes.generations} rollouts)")
    alias = manifest.get("policy_alias") or catalog.policy
    sft_llm, _, _ = load_orchestrator(work / "sft_only")
    sft_llm = as_engine(sft_llm, engine, settings)
    by_name["sft_only"] = orchestrator("sft_only", sft_llm, policy_alias=alias,
                                       description=f"the warm start only (SFT {sizes.sft_steps} steps)")
    if "sft_grpo_seed1" in trained:
        llm, _, _ = load_orchestrator(work / "sft_grpo_seed1")
        llm = as_engine(llm, engine, settings)
        by_name["sft_grpo_seed1"] = orchestrator("sft_grpo_seed1", llm, policy_alias=alias,
                                                 description="the same SFT checkpoint, GRPO with seed + 1")
    choices = cascade_order(expert_choices(catalog))
    handlers: dict[str, Any] = {"orchestrator": sft_llm}
    program = next((c for c in choices if catalog.tool(c.tool).backend.role == "program"), None)
    answer = next((c for c in choices if catalog.tool(c.tool).backend.role == "answer"), None)
    if program is not None:
        handlers["program"] = FixedRoutePolicy([program], name="route-program")
    if answer is not None:
        handlers["answer"] = FixedRoutePolicy([answer], name="route-answer")
    texts = [i.prompt[-1]["content"] for i in train_set]
    labels = [route_label(i, handlers) for i in train_set]
    router = EmbeddingRouter.fit(texts, labels, build_embedder(), seed=args.seed)
    routed = RoutedPolicy(router, handlers)
    by_name["embedding_router"] = Method(
        name="embedding_router", role="orchestrator", policy=routed, policy_alias=alias, tools="all",
        description="logistic regression over MiniLM embeddings of the task, routing to: "
                    + ", ".join(f"{k}={v.model}" for k, v in handlers.items()))
    missing = [a for a in ARMS if a not in by_name and not (a == "sft_grpo_seed1" and not sizes.second_seed)]
    if missing:
        raise ConfigError(None, f"arms {missing} could not be built ({'; '.join(notes)}); the catalog needs "
                          "expert tools that end the task (e.g. ask_direct)", key="tools")
    arms = [by_name[a] for a in ARMS if a in by_name]

    # 4. evaluation
    eval_config = EvalConfig(episode=episode, prompt=PromptConfig(include_policy=False), batch_size=sizes.batch_size,
                             seed=args.seed)
    log(f"evaluating {len(arms)} arms on {sum(len(b.items) for b in benchmarks)} items ...")
    result = evaluate(arms, benchmarks, catalog=catalog, settings=settings, config=eval_config, llm_for=llm_for,
                      domain_roots=[tasks], progress=lambda line: log("  " + line))
    result.check_identical_tasks()
    groups = {"in_domain": ["tool_use_in_domain", "qa_in_domain"], "unseen_domains": ["tool_use_unseen", "qa_unseen"]}
    grid = budgets(result.records, args.budget_points)
    figures = arm_figures(result, groups, grid)
    for name, train_result in trained.items():
        figures[name]["grpo_steps"] = grpo_steps(train_result.history)
        figures[name]["train_metrics"] = {k: v for k, v in train_result.metrics.items() if math.isfinite(v)}
    figures["embedding_router"]["router"] = {
        "train_accuracy": router.accuracy(texts, labels), "labels": {k: labels.count(k) for k in sorted(set(labels))},
        "route_shares": routed.shares()}
    lists = task_lists(result.records)
    reference = next(iter(lists.values()))
    doc: dict[str, Any] = {
        "size": size_name, "engine": engine, "sizes": asdict(sizes), "seed": args.seed, "model": args.model,
        "domains": {"train": train_domains, "unseen": unseen}, "tools": [t.name for t in catalog.tools],
        "preference_kinds": {"train": train_kinds, "held_out": eval_kinds},
        "benchmarks": {b.name: len(b.items) for b in benchmarks}, "groups": groups,
        "train_instances": len(train_set), "tasks": len(reference), "task_list_sha": task_list_sha(reference),
        "identical_tasks": all(keys == reference for keys in lists.values()), "budgets": grid, "arms": figures,
        "seconds": {"train": train_s, "eval": sum(result.seconds.values()), "total": 0.0}, "notes": notes,
        "out": str(out),
    }
    doc["seconds"]["total"] = time.perf_counter() - started

    # 5. outputs
    atomic_write_json(out / "results.json", doc)
    atomic_write_text(out / "report.md", markdown(doc, result))
    pareto_plot(result, out / "cost_accuracy.png", title="Learning benchmark: cost vs accuracy")
    budget_plot(doc, out / "accuracy_budget.png")
    doc["mlflow_run_id"] = log_mlflow(doc, out, args.tracking_uri or f"sqlite:///{out / 'mlflow.db'}")
    atomic_write_json(out / "results.json", doc)
    if not args.keep_checkpoints:
        shutil.rmtree(work, ignore_errors=True)
    return doc


def _qa_domain(item: Any) -> str | None:
    from toolorchestra.episodes.pool import task_domain

    return task_domain(item)


def main(argv: list[str] | None = None) -> None:
    from toolorchestra.core.errors import ConfigError

    args = parse_args(argv)
    try:
        doc = run(args, log=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True))
    except ConfigError as error:  # bad input: say what, without a traceback
        raise SystemExit(f"bench_learning: {error}") from None
    # With --json, stdout carries only the JSON line; the table goes to stderr.
    print((Path(doc["out"]) / "report.md").read_text(encoding="utf-8"), file=sys.stderr if args.json else sys.stdout)
    summary = {name: {k: arm[k] for k in FIGURES} | {"unseen_domains": arm["unseen_domains"]}
               for name, arm in doc["arms"].items()}
    if args.json:
        print(json.dumps({**doc, "summary": summary}))


if __name__ == "__main__":
    main()
