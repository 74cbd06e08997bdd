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
prompted base model, each catalog expert alone, a random router (`toolorchestra.evaluation.methods`).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipelines._stage import StageParams, StagePaths
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings, load_settings
from toolorchestra.evaluation.benchmarks import (
    BenchmarkSpec,
    HeldOut,
    PreferenceSpec,
    QASpec,
    ToolScaleSpec,
)
from toolorchestra.evaluation.runner import PromptConfig
from toolorchestra.llm.config import LLMConfig
from toolorchestra.rl.episodes import EpisodeConfig

log = logging.getLogger(__name__)
_STRICT = ConfigDict(extra="forbid", frozen=True)
CANDIDATE, CHAMPION = "trained", "champion"


class MethodsConfig(BaseModel):
    model_config = _STRICT

    champion: bool = True
    prompted: bool = True
    experts: list[str] | Literal["all"] = Field("all", description="catalog model aliases, `all`, or [] for none")
    random_router: bool = True


class JudgeConfig(BaseModel):
    """The LLM judge used when exact match fails: a catalog model alias or an explicit endpoint."""

    model_config = _STRICT

    model: str | None = None
    backend: LLMConfig | None = None
    max_tokens: int = Field(8, ge=1, le=32_768)

    @model_validator(mode="after")
    def _one(self) -> JudgeConfig:
        if self.model and self.backend:
            raise ValueError("judge: give either `model` (a catalog alias) or `backend` (an endpoint), not both")
        return self


def _default_benchmarks() -> list[Any]:
    return [ToolScaleSpec(name="toolscale", max_tasks=2), QASpec(name="qa", max_tasks=2),
            PreferenceSpec(name="preferences", max_tasks=2)]


class Params(StageParams):
    seed: int = 0
    model: str | None = Field(None, description="registry ref or folder evaluated instead of deps.model")
    registered_model: str = Field("orchestrator", min_length=1)
    benchmarks: list[BenchmarkSpec] = Field(default_factory=_default_benchmarks, min_length=1)
    heldout: HeldOut = HeldOut()
    methods: MethodsConfig = MethodsConfig()
    episode: EpisodeConfig = EpisodeConfig(max_turns=3, max_tokens=64)
    prompt: PromptConfig = PromptConfig()
    batch_size: int = Field(16, ge=1, le=4_096)
    adherence_margin: float = Field(0.05, ge=0.0, lt=1.0)
    judge: JudgeConfig = JudgeConfig()
    tools: list[str] | None = Field(None, description="catalog tools every method is offered (None: all)")
    device: str = "auto"

    @model_validator(mode="after")
    def _check(self) -> Params:
        if "report" not in self.outs:
            raise ValueError("outs.report is required (e.g. reports/eval)")
        if Path(self.outs["report"]).suffix:
            raise ValueError("outs.report must be a folder path (no file suffix)")
        if self.model is None and "model" not in self.deps:
            raise ValueError("deps.model is required (the checkpoint, e.g. models/orchestrator), or set `model`")
        kinds = {b.kind for b in self.benchmarks}
        if kinds & {"toolscale", "qa", "preferences"} and "tasks" not in self.deps:
            raise ValueError("deps.tasks is required by the toolscale / qa / preferences benchmarks (data/validated)")
        if "preferences" in kinds and "preferences" not in self.deps:
            raise ValueError("deps.preferences is required by the preferences benchmark (data/preferences)")
        return self


# ------------------------------------------------------------------------------ inputs


def _load_candidate(params: Params, paths: StagePaths, settings: Settings) -> dict[str, Any]:
    """The candidate's policy, catalog, manifest, weights hash and provenance."""
    from toolorchestra.registry.bundle import weights_sha256

    ref = params.model
    if ref is not None and ref.startswith("models:/"):
        from toolorchestra.registry.policy import load_registered

        model = load_registered(ref, settings, device=params.device)
        return {"llm": model.llm, "catalog": model.catalog, "manifest": model.manifest, "ref": model.ref,
                "sha": model.manifest.get("weights_sha256"), "version": model.version}
    from toolorchestra.rl.checkpoint import load_orchestrator

    folder = Path(ref).expanduser() if ref is not None else paths.deps["model"]
    if not folder.is_absolute():
        folder = paths.workspace / folder
    llm, catalog, manifest = load_orchestrator(folder, device=params.device)
    llm.model = "trained"
    return {"llm": llm, "catalog": catalog, "manifest": manifest, "ref": str(folder), "sha": weights_sha256(folder)}


def _preference_pairs(paths: StagePaths) -> list[Any] | None:
    from toolorchestra.preferences.pairs import load_pairs

    source = paths.deps.get("preferences")
    if source is None:
        return None
    return load_pairs(source / "eval.jsonl" if source.is_dir() else source)


def _judge(params: Params, catalog: Any, settings: Settings, llm_for: Callable[[str], Any]) -> Any:
    from toolorchestra.evaluation.judges import LLMJudge
    from toolorchestra.llm.config import build_llm

    if params.judge.model:
        if params.judge.model not in catalog.models:
            raise ConfigError(None, f"judge model {params.judge.model!r} is not a catalog model alias; known: "
                              f"{sorted(catalog.models)}", key="evaluate.judge.model")
        return LLMJudge(llm_for(params.judge.model), max_tokens=params.judge.max_tokens, name=params.judge.model)
    if params.judge.backend is not None:
        return LLMJudge(build_llm(params.judge.backend, settings), max_tokens=params.judge.max_tokens)
    return None


def _champion(params: Params, candidate: dict[str, Any], settings: Settings) -> tuple[Any | None, str]:
    """(the registry's champion or None, why it is not evaluated)."""
    if not params.methods.champion:
        return None, "champion evaluation disabled (methods.champion: false)"
    from toolorchestra.registry.policy import load_registered
    from toolorchestra.registry.store import CHAMPION as ALIAS
    from toolorchestra.registry.store import alias_version, client_for

    version = alias_version(client_for(settings), params.registered_model, ALIAS)
    if version is None:
        return None, f"no champion of {params.registered_model!r} in the registry yet"
    if candidate["sha"] and version.tags.get("orchestra.weights_sha256") == candidate["sha"]:
        return None, f"the champion (version {version.version}) has the candidate's weights"
    return load_registered(f"models:/{params.registered_model}/{version.version}", settings, device=params.device), ""


def build_methods(params: Params, candidate: dict[str, Any], catalog: Any, settings: Settings,
                  llm_for: Callable[[str], Any]) -> tuple[list[Any], dict[str, Any], list[str]]:
    """(methods, champion info for the report, notes)."""
    from toolorchestra.evaluation import methods as m
    from toolorchestra.llm.config import LocalLLMConfig, build_llm

    manifest = candidate["manifest"]
    alias = manifest.get("policy_alias") or catalog.policy
    notes: list[str] = []
    out = [m.orchestrator(CANDIDATE, candidate["llm"], policy_alias=alias, role="candidate",
                          description=f"the trained orchestrator ({candidate['ref']})", model=candidate["ref"],
                          weights_sha256=candidate["sha"])]
    champion_info: dict[str, Any] = {}
    champion, why = _champion(params, candidate, settings)
    if champion is not None:
        out.append(m.orchestrator(CHAMPION, champion.llm, policy_alias=champion.policy_alias, role="champion",
                                  description=f"the current champion ({champion.ref})", model=champion.ref,
                                  version=champion.version))
        champion_info = {"method": CHAMPION, "version": champion.version, "ref": champion.ref,
                         "weights_sha256": champion.manifest.get("weights_sha256")}
    else:
        notes.append(why)
    if params.methods.prompted:
        base = manifest.get("base_model")
        if base:
            policy = build_llm(LocalLLMConfig(model=str(base), device=params.device), settings)
            out.append(m.orchestrator("prompted", policy, policy_alias=alias,
                                      description=f"the untrained base model `{base}`, prompted"))
        else:
            notes.append("the checkpoint names no base model: the prompted orchestrator was skipped")
    if params.methods.experts:
        chosen = None if params.methods.experts == "all" else list(params.methods.experts)
        out.extend(m.expert_methods(catalog, llm_for, chosen))
    if params.methods.random_router:
        out.append(m.random_router(catalog, seed=params.seed, max_turns=params.episode.max_turns))
    return out, champion_info, notes


# ------------------------------------------------------------------------------ outputs


def stage_metrics(run: Any) -> dict[str, float]:
    """The candidate's headline metrics and `eval/<method>/<benchmark>/<metric>` for every method."""
    out: dict[str, float] = {}
    for method, per in run.summary.items():
        for bench, metrics in per.items():
            for key in ("accuracy", "cost_mean", "latency_mean", "format_valid_rate"):
                out[f"eval/{method}/{bench}/{key}"] = float(getattr(metrics, key))
            if metrics.adherence is not None:
                out[f"eval/{method}/{bench}/adherence"] = float(metrics.adherence)
        n = sum(1 for r in run.records if r.method == method)
        if run.seconds.get(method):
            out[f"eval/{method}/episodes_per_s"] = n / run.seconds[method]
    cand = run.summary[CANDIDATE]["overall"]
    out.update({"accuracy": cand.accuracy, "cost_mean": cand.cost_mean, "latency_mean": cand.latency_mean,
                "format_valid_rate": cand.format_valid_rate, "eval_tasks": float(cand.n)})
    if cand.adherence is not None:
        out["adherence"] = cand.adherence
    return out


def per_task_row(record: dict[str, Any]) -> dict[str, Any]:
    """A per-task result without its trajectory, for the table artifact (trajectories stay in
    `eval/per_task.jsonl`)."""
    import json

    judgement = record.get("judgement") or {}
    return {"method": record["method"], "benchmark": record["benchmark"], "task_id": record["task_id"],
            "variant": record["variant"], "preference": record.get("preference_kind"),
            "correct": record["correct"], "judge": judgement.get("method"), "answered": record["answered"],
            "format_valid": record["format_valid"], "cost_usd": record["cost_usd"], "latency_s": record["latency_s"],
            "turns": record["turns"], "stop_reason": record.get("stop_reason"),
            "tool_calls": json.dumps(record.get("tool_calls") or {}, sort_keys=True)}


def _log_to_mlflow(folder: Path, files: dict[str, Path]) -> None:
    import mlflow

    if mlflow.active_run() is None:
        return
    import json

    import pandas as pd

    # The table as MLflow's table artifact (shown in the UI) beside the report folder's own files.
    mlflow.log_table(data=pd.DataFrame(json.loads(files["table"].read_text())), artifact_file="evaluation/table.json")
    rows = [json.loads(line) for line in files["per_task"].read_text(encoding="utf-8").splitlines() if line.strip()]
    mlflow.log_table(data=pd.DataFrame([per_task_row(r) for r in rows]), artifact_file="evaluation/per_task.json")
    mlflow.log_artifacts(str(folder), artifact_path="eval")
    mlflow.set_tag("orchestra.eval.fingerprint", json.loads(files["metrics"].read_text())["fingerprint"])


def report_markdown(workspace: Path, params_file: str = "params.yaml") -> str | None:
    """The evaluate stage's `report.md` with the Pareto plot embedded (a data URI), for a Prefect
    markdown artifact published by the flow; None when there is no report."""
    import base64

    from pipelines.runner import stage_output

    folder = stage_output(workspace, "evaluate", "report", "reports/eval", params_file)
    if not (folder / "report.md").is_file():
        return None
    text = (folder / "report.md").read_text(encoding="utf-8")
    plot = folder / "pareto.png"
    if plot.is_file():
        text += f"\n![cost vs accuracy](data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()})\n"
    return text


def run(params: Params, paths: StagePaths, *, settings: Settings | None = None,
        llm_for: Callable[[str], Any] | None = None) -> dict[str, float]:
    from toolorchestra.evaluation.benchmarks import build_benchmarks, training_task_ids
    from toolorchestra.evaluation.report import write_report
    from toolorchestra.evaluation.runner import EvalConfig, evaluate
    from toolorchestra.llm.config import build_llm

    settings = settings or load_settings(workspace=paths.workspace)
    candidate = _load_candidate(params, paths, settings)
    catalog = candidate["catalog"]
    if params.tools is not None:
        unknown = sorted(set(params.tools) - {t.name for t in catalog.tools})
        if unknown:
            raise ConfigError(None, f"tools {unknown} are not in the model's catalog; known: "
                              f"{[t.name for t in catalog.tools]}", key="evaluate.tools")
        catalog = catalog.subset(params.tools)
    if llm_for is None:
        def llm_for(alias: str) -> Any:
            return build_llm(catalog.models[alias].backend, settings)

    train_ids = training_task_ids(paths.deps.get("dataset"))
    benchmarks = build_benchmarks(
        params.benchmarks, tasks_root=paths.deps.get("tasks"), workspace=paths.workspace, seed=params.seed,
        heldout=params.heldout, train_ids=train_ids, preference_pairs=_preference_pairs(paths),
        domains_root=paths.deps.get("domains"), tools=[t.name for t in catalog.tools],
    )
    methods, champion, notes = build_methods(params, candidate, catalog, settings, llm_for)
    judge = _judge(params, catalog, settings, llm_for)
    config = EvalConfig(episode=params.episode, prompt=params.prompt, batch_size=params.batch_size,
                        seed=params.seed, adherence_margin=params.adherence_margin)
    result = evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config, judge=judge,
                      llm_for=llm_for, progress=log.info)
    folder = paths.outs["report"]
    files = write_report(result, folder, title=f"Evaluation of {candidate['ref']}", notes=notes,
                         candidate=CANDIDATE, champion=champion or None, model=candidate["ref"],
                         weights_sha256=candidate["sha"], registered_model=params.registered_model,
                         judge={"model": judge.name if judge else None}, train_set_known=train_ids is not None)
    _log_to_mlflow(folder, files)
    return stage_metrics(result)
