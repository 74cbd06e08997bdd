"""Stage `describe`: the tool catalog with descriptions derived from measured behaviour.

Reads the source catalog (`deps.catalog`, YAML or JSON) and the validated tasks (`deps.tasks`;
`deps.domains` when the domains' databases live outside it), runs every LLM tool x expert on a
seeded sample per category (`toolorchestra.describe.descriptions`), and writes the described
catalog to `outs.catalog` (`data/catalog/tools.json`), validated by the catalog model, with
relative paths rebased to its new folder. Per tool/model/category figures go to MLflow as a table
(`describe/tool_stats.json`) and as metrics `accuracy/<tool>/<model>/<category>`.

`summarizer` names a catalog model that writes a strengths / failure-modes summary per tool and
model from the recorded trajectories (off by default: the embedded 135M model writes poor ones).
Run: `orchestra stage describe` (dvc.yaml) or `orchestra describe` (ad hoc).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from stagekit.contract import StageParams, StagePaths
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json
from toolorchestra.core.settings import Settings
from toolorchestra.describe.descriptions import describe_catalog, relocated_dict
from toolorchestra.describe.measure import DescribeConfig, Measurement
from toolorchestra.episodes.pool import load_pool
from toolorchestra.llm.config import LocalEngine
from toolorchestra.tools.catalog import load_catalog, parse_catalog


class Params(StageParams):
    REQUIRED_DEPS = {"catalog": "toolorchestra/tools/catalogs/embedded.yaml", "tasks": "data/validated"}
    REQUIRED_OUTS = {"catalog": "data/catalog/tools.json"}

    seed: int = 0
    summarizer: str | None = Field(None, description="catalog model alias that summarises trajectories")
    measure: DescribeConfig = DescribeConfig()
    engine: LocalEngine | None = Field(None, description="engine of the catalog's local models: transformers or "
                                       "llamacpp; None: as the catalog says")

    @model_validator(mode="after")
    def _paths(self) -> Params:
        if "seed" in self.measure.model_fields_set:
            raise ValueError("set the seed once, as describe.seed (or base.seed), not measure.seed")
        return self

    def config(self) -> DescribeConfig:
        return self.measure.model_copy(update={"seed": self.seed})


def _log_to_mlflow(measurement: Measurement) -> None:
    import mlflow

    if mlflow.active_run() is None:
        return
    import pandas as pd

    mlflow.log_table(data=pd.DataFrame(measurement.rows()), artifact_file="describe/tool_stats.json")
    mlflow.log_dict({"records": [r.model_dump() for r in measurement.records]}, "describe/records.json")


def metrics_of(measurement: Measurement) -> dict[str, float]:
    rows = measurement.rows()
    out: dict[str, float] = {
        "tools_described": float(len(measurement.stats)),
        "models_measured": float(len({r["model"] for r in rows})),
        "calls_measured": float(len(measurement.records)),
        "summaries": float(len(measurement.summaries)),
        "summary_failures": float(measurement.summary_failures),
    }
    for row in rows:
        out[f"accuracy/{row['tool']}/{row['model']}/{row['category']}"] = float(row["accuracy"])
    return out


def describe(params: Params, *, catalog_path: Path, tasks_path: Path, out_path: Path, settings: Settings,
             domains_path: Path | None = None, search_corpus: Path | None = None,
             llm_for: Any = None) -> tuple[dict[str, float], Measurement]:
    """Measure, describe and write the catalog to `out_path` (atomically); returns metrics.

    With `search_corpus` (the pipeline's records as documents), local search indexes it, so the
    measured lookup accuracy and the catalog the later stages use refer to the synthesized data.
    """
    from toolorchestra.llm.config import build_llm, catalog_llms, on_engine

    catalog = load_catalog(catalog_path)
    if search_corpus is not None:
        catalog = catalog.with_search_corpus(search_corpus)
    pool = load_pool(tasks_path, domains_root=domains_path, required=True)
    summarizer = None
    if params.summarizer is not None:
        if params.summarizer not in catalog.models:
            raise ConfigError(catalog_path, f"summarizer {params.summarizer!r} is not a model alias of the catalog; "
                              f"known: {sorted(catalog.models)}", key="describe.summarizer")
        summarizer = build_llm(on_engine(catalog.models[params.summarizer].backend, params.engine), settings)
    if llm_for is None:
        llm_for = catalog_llms(catalog.models, params.engine, settings)

    try:
        described, measurement = describe_catalog(catalog, pool, settings, params.config(), llm_for=llm_for,
                                                  summarizer=summarizer)
    except ValueError as exc:  # e.g. measure.tools names a tool the catalog lacks
        raise ConfigError(catalog_path, str(exc), key="describe.measure") from None
    data = relocated_dict(described, out_path.parent)
    parse_catalog(data, source=out_path, base_dir=out_path.parent)  # what we write must load
    atomic_write_json(out_path, data)
    _log_to_mlflow(measurement)
    return metrics_of(measurement), measurement


def run(params: Params, paths: StagePaths) -> dict[str, float]:
    metrics, _ = describe(
        params, catalog_path=paths.deps["catalog"], tasks_path=paths.deps["tasks"],
        domains_path=paths.deps.get("domains"), search_corpus=paths.deps.get("search_corpus"),
        out_path=paths.outs["catalog"], settings=paths.settings,
    )
    return metrics
