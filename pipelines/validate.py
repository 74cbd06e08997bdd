"""Stage `validate`: filter synthesized tasks, run the Great Expectations suites, keep what passes.

Inputs (`deps`): `toolscale` (domain folders written by `synthesize`) and `qa` (its `*.jsonl`).
Filters: golden calls raise, solvable by an empty trajectory, duplicates, and pass@k with a named
solver when `pass_at_k.enabled` (off in the embedded profile). Outputs (`outs`): `validated`
(`toolscale/<domain>/...` with only kept tasks, `qa/*.jsonl`) and `report` (`filter_stats.json`,
`suites.json`, Data Docs HTML in `data_docs/`). A failing suite raises `OrchestraError` listing the
failing expectations, so the stage fails and nothing moves into place.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.errors import OrchestraError
from toolorchestra.synthesis.validation import PassAtK, ValidationConfig, domain_dirs, validate_domains


class Params(StageParams):
    REQUIRED_DEPS = {"toolscale": "data/toolscale"}
    REQUIRED_OUTS = {"validated": "data/validated", "report": "reports/validation"}

    min_actions: int = Field(1, ge=0, le=10_000)
    max_actions: int = Field(30, ge=1, le=10_000)
    min_tasks_per_domain: int = Field(1, ge=0, le=1_000_000)
    min_qa: int = Field(1, ge=0, le=1_000_000)
    pass_at_k: PassAtK = PassAtK()

    @model_validator(mode="after")
    def _check(self) -> Params:
        if self.max_actions < self.min_actions:
            raise ValueError("max_actions must be >= min_actions")
        return self


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    config = ValidationConfig(min_actions=params.min_actions, max_actions=params.max_actions,
                              min_tasks_per_domain=params.min_tasks_per_domain, min_qa=params.min_qa,
                              pass_at_k=params.pass_at_k)
    validated, report = paths.outs["validated"], paths.outs["report"]
    qa_files = sorted(paths.deps["qa"].glob("*.jsonl")) if "qa" in paths.deps else []
    (validated / "qa").mkdir(parents=True, exist_ok=True)
    outcome = validate_domains(domain_dirs(paths.deps["toolscale"]), out=validated / "toolscale", report=report,
                               config=config, qa_files=qa_files, qa_out=validated / "qa")
    if not outcome.success:
        raise OrchestraError("validation suite failed:\n  " + "\n  ".join(outcome.failures()))
    metrics: dict[str, float] = {f"tasks_{k}": v for k, v in outcome.totals().items()}
    for name, counts in outcome.counts.items():
        metrics[f"{name}_kept"] = counts["kept"]
    if "qa" in outcome.counts:
        metrics.update({f"qa_{k}": v for k, v in outcome.counts["qa"].items()})
    metrics["suite_expectations"] = sum(s.evaluated for s in outcome.suites.values())
    return metrics
