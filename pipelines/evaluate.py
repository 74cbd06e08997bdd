"""Stage `evaluate`: the trained orchestrator against baselines on accuracy, cost, latency and
preference adherence, all in one evaluation on identical task lists.

Inputs (`deps`):
- `model`: the checkpoint folder of the `train` stage (`models/orchestrator`); `model:` (a
  parameter, e.g. from `orchestra evaluate --model`) may name a registry reference
  (`models:/orchestrator@champion`) or another folder instead;
- `tasks`: validated tasks (`data/validated`), source of the held-out `toolscale`, `qa` and
  `preferences` benchmarks (`domains`: the domain folders when they live elsewhere);
- `preferences`: the preference folder (its `eval.jsonl`) or file, for the `preferences` benchmark;
- `dataset` (optional): the exported training set; with it, *held out* means "not in its train
  split", without it the assembly's split is re-derived (`heldout.eval_task_fraction`, base seed).

Methods (`methods`): the trained orchestrator (the candidate), the registry's current `champion`
re-evaluated on the same tasks (skipped when there is none or it has the candidate's weights), the
prompted base model, the SFT-only warm start (`deps.warm_start`, the train stage's second output),
each catalog expert alone, a random router (`toolorchestra.evaluation.methods`).

Output (`outs.report`, `reports/eval/`): `metrics.json`, `per_task.jsonl` (each judgement with its
trajectory), `tasks.json`, `adherence.jsonl`, `table.json`, `report.md`, `pareto.png`
(`toolorchestra.evaluation.report`); all logged to the stage's MLflow run (the table with
`log_table` as `evaluation/table.json`, the per-task results as `evaluation/per_task.json`, the
files under `eval/`, the plot as `eval/pareto.png`). Metrics: the candidate's `accuracy`, `cost_mean`,
`latency_mean`, `format_valid_rate`, `adherence`, and `eval/<method>/<benchmark>/<metric>` for all.

The champion is read from the registry, which DVC does not track: re-run with `--force evaluate`
after the champion changes outside the flow. Run: `orchestra stage evaluate` (dvc.yaml) or
`orchestra evaluate [--model REF] [--bench NAME]` (ad hoc).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.environment import EpisodeConfig
from toolorchestra.evaluation.benchmarks import (
    BenchmarkSpec,
    HeldOut,
    PreferenceSpec,
    QASpec,
    ToolScaleSpec,
)
from toolorchestra.evaluation.judges import JudgeConfig
from toolorchestra.evaluation.methods import CANDIDATE, MethodsConfig
from toolorchestra.evaluation.runner import PromptConfig
from toolorchestra.llm.config import LocalEngine

log = logging.getLogger(__name__)


def _default_benchmarks() -> list[Any]:
    return [ToolScaleSpec(name="toolscale", max_tasks=2), QASpec(name="qa", max_tasks=2),
            PreferenceSpec(name="preferences", max_tasks=2)]


class Params(StageParams):
    REQUIRED_OUTS = {"report": "reports/eval"}

    seed: int = 0
    model: str | None = Field(None, description="registry ref or folder evaluated instead of deps.model")
    registered_model: str = Field("orchestrator", min_length=1)
    benchmarks: list[BenchmarkSpec] = Field(default_factory=_default_benchmarks, min_length=1)
    heldout: HeldOut = HeldOut()
    methods: MethodsConfig = MethodsConfig()
    episode: EpisodeConfig = EpisodeConfig(max_turns=3, max_tokens=64)
    prompt: PromptConfig = PromptConfig()
    batch_size: int = Field(16, ge=1, le=4_096, description="episodes of a method run at once")
    scheduling: Literal["auto", "per_episode", "lockstep"] = Field(
        "auto", description="per_episode: each episode in its own thread; lockstep: one batched generation per "
                            "turn; auto: per episode for remote endpoints and routers, lockstep for local engines")
    method_workers: int = Field(1, ge=1, le=16, description="methods evaluated at once (one core each on "
                                "llama.cpp's one-thread engines)")
    adherence_margin: float = Field(0.05, ge=0.0, lt=1.0)
    judge: JudgeConfig = JudgeConfig()
    tools: list[str] | None = Field(None, description="catalog tools every method is offered (None: all)")
    device: str = "auto"
    engine: LocalEngine | None = Field(None, description="engine of every local model (policies, experts, "
                                       "judge): transformers or llamacpp; None: as the catalog says")
    traces: bool = Field(True, description="log every episode as an MLflow trace of the stage's run")

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.model is None and "model" not in self.deps:
            raise ValueError("deps.model is required (the checkpoint, e.g. models/orchestrator), or set `model`")
        kinds = {b.kind for b in self.benchmarks}
        if kinds & {"toolscale", "qa", "preferences"} and "tasks" not in self.deps:
            raise ValueError("deps.tasks is required by the toolscale / qa / preferences benchmarks (data/validated)")
        if "preferences" in kinds and "preferences" not in self.deps:
            raise ValueError("deps.preferences is required by the preferences benchmark (data/preferences)")
        return self


# ------------------------------------------------------------------------------ inputs


def _preference_pairs(paths: StagePaths) -> list[Any] | None:
    from toolorchestra.preferences.pairs import load_pairs

    source = paths.deps.get("preferences")
    if source is None:
        return None
    return load_pairs(source / "eval.jsonl" if source.is_dir() else source)


# ------------------------------------------------------------------------------ outputs


def _log_to_mlflow(folder: Path, files: dict[str, Path]) -> None:
    import mlflow

    if mlflow.active_run() is None:
        return
    import json

    import pandas as pd

    from toolorchestra.evaluation.report import per_task_row

    # The table as MLflow's table artifact (shown in the UI) beside the report folder's own files.
    mlflow.log_table(data=pd.DataFrame(json.loads(files["table"].read_text())), artifact_file="evaluation/table.json")
    rows = [json.loads(line) for line in files["per_task"].read_text(encoding="utf-8").splitlines() if line.strip()]
    mlflow.log_table(data=pd.DataFrame([per_task_row(r) for r in rows]), artifact_file="evaluation/per_task.json")
    mlflow.log_artifacts(str(folder), artifact_path="eval")
    mlflow.set_tag("orchestra.eval.fingerprint", json.loads(files["metrics"].read_text())["fingerprint"])


def _sft_only(folder: Path, params: Params, settings: Any, catalog: Any) -> Any:
    """The warm-start checkpoint (SFT, no GRPO) as a method, on the stage's engine."""
    from toolorchestra.evaluation.methods import orchestrator
    from toolorchestra.llm.config import as_engine
    from toolorchestra.rl.checkpoint import load_orchestrator

    llm, _, manifest = load_orchestrator(folder, device=params.device)
    llm = as_engine(llm, params.engine, settings)
    llm.model = "sft_only"
    return orchestrator("sft_only", llm, policy_alias=manifest.get("policy_alias") or catalog.policy,
                        description="the warm start before GRPO (SFT on golden trajectories only)")


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    from toolorchestra.core.checksum import weights_sha256
    from toolorchestra.evaluation.benchmarks import build_benchmarks, training_task_ids
    from toolorchestra.evaluation.judges import build_judge
    from toolorchestra.evaluation.methods import build_methods
    from toolorchestra.evaluation.report import headline_metrics, write_report
    from toolorchestra.evaluation.runner import EvalConfig, evaluate
    from toolorchestra.evaluation.traces import EpisodeTracer
    from toolorchestra.llm.config import as_engine, catalog_llms
    from toolorchestra.registry.policy import champion_to_compare, load_candidate
    from toolorchestra.rl.select import exported

    settings = paths.settings
    candidate = load_candidate(params.model, paths.deps.get("model", paths.workspace), paths.workspace, settings,
                               device=params.device)
    candidate.llm = as_engine(candidate.llm, params.engine, settings)
    catalog = candidate.catalog
    if params.tools is not None:
        unknown = sorted(set(params.tools) - {t.name for t in catalog.tools})
        if unknown:
            raise ConfigError(None, f"tools {unknown} are not in the model's catalog; known: "
                              f"{[t.name for t in catalog.tools]}", key="evaluate.tools")
        catalog = catalog.subset(params.tools)

    llm_for = catalog_llms(catalog.models, params.engine, settings)

    train_ids = training_task_ids(paths.deps.get("dataset"))
    benchmarks = build_benchmarks(
        params.benchmarks, tasks_root=paths.deps.get("tasks"), workspace=paths.workspace, seed=params.seed,
        heldout=params.heldout, train_ids=train_ids, preference_pairs=_preference_pairs(paths),
        domains_root=paths.deps.get("domains"), tools=[t.name for t in catalog.tools],
    )
    champion, champion_note = (champion_to_compare(params.registered_model, candidate.sha, settings,
                                                   device=params.device)
                               if params.methods.champion else (None, "champion evaluation disabled "
                                                                      "(methods.champion: false)"))
    if champion is not None:
        champion.llm = as_engine(champion.llm, params.engine, settings)
    methods, champion_info, notes = build_methods(
        params.methods, candidate=candidate, champion=champion, champion_note=champion_note, catalog=catalog,
        settings=settings, llm_for=llm_for, seed=params.seed, max_turns=params.episode.max_turns,
        device=params.device, engine=params.engine)
    warm_start = paths.deps.get("warm_start")
    if params.methods.sft_only and warm_start is not None:
        if weights_sha256(warm_start) == candidate.sha:  # the train stage exported its warm start
            notes.append("sft_only was not run: the warm start is the candidate itself (the same weights)")
        else:
            methods.append(_sft_only(warm_start, params, settings, catalog))
    selection = candidate.manifest.get("selection")
    if selection:  # the train stage's checkpoint choice, on its validation split
        notes.append(f"the candidate is {exported(selection)}, chosen by the train stage on {selection['n']} "
                     f"validation tasks: {selection['reason']}")
    judge = build_judge(params.judge, catalog, settings, llm_for, engine=params.engine)
    config = EvalConfig(episode=params.episode, prompt=params.prompt, batch_size=params.batch_size,
                        method_workers=params.method_workers, scheduling=params.scheduling, seed=params.seed,
                        adherence_margin=params.adherence_margin)
    tracer = EpisodeTracer.for_active_run() if params.traces else None
    result = evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config, judge=judge,
                      llm_for=llm_for, progress=log.info, on_episode=tracer,
                      llm_for_worker=lambda k: catalog_llms(catalog.models, params.engine, settings, replica=k))
    folder = paths.outs["report"]
    files = write_report(result, folder, title=f"Evaluation of {candidate.ref}", notes=notes,
                         candidate=CANDIDATE, champion=champion_info or None, model=candidate.ref,
                         weights_sha256=candidate.sha, registered_model=params.registered_model,
                         judge={"model": judge.name if judge else None}, train_set_known=train_ids is not None)
    _log_to_mlflow(folder, files)
    return headline_metrics(result)
