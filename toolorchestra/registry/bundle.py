"""The registered model's files: a training checkpoint repackaged for MLflow, and loaded back.

A registered orchestrator is one MLflow pyfunc model (`pyfunc.OrchestratorModel`) with two
artifacts:

- `transformers/`: the policy's weights and tokenizer (with its tools-aware chat template) as an
  MLflow **transformers** model (`mlflow.transformers.save_model`, task `text-generation`), so the
  weights load on their own with `mlflow.transformers.load_model(<model>/artifacts/transformers)`;
- `orchestrator/`: `catalog.json` (the tools and prices it was trained with; local search
  documents copied into `corpus/<tool>/` when small enough, so the model is self-contained),
  `orchestrator.json` (the checkpoint's manifest: base model, steps, episode settings, the
  policy's catalog alias).

`prepare_bundle(checkpoint, work)` builds both; `load_bundle(artifacts)` returns the policy
(`LocalLLM`, or `LlamaCppLLM` for `engine="llamacpp"`), the catalog and the manifest. The
package's own code travels with the model (`code_paths`), and `pip_requirements()` pins the
libraries it needs to their installed versions.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from toolorchestra.core.checksum import weights_sha256
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json
from toolorchestra.tools.catalog import Catalog, LocalSearchBackend, parse_catalog

WEIGHTS, ORCHESTRATOR = "transformers", "orchestrator"
CATALOG, MANIFEST = "catalog.json", "orchestrator.json"
REQUIREMENTS = ("mlflow", "torch", "transformers", "accelerate", "safetensors", "pydantic", "pydantic-settings",
                "pyyaml", "jsonschema", "tenacity", "openai", "httpx", "numpy", "pandas", "sentence-transformers",
                "faiss-cpu", "gguf", "jinja2")


def pip_requirements() -> list[str]:
    """The pyfunc's runtime libraries pinned to this environment's versions (passing them
    explicitly also spares MLflow its slow dependency inference)."""
    out = []
    for name in REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return out


def _folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def bundle_catalog(catalog: Catalog, target: Path, *, max_corpus_mb: float = 64.0) -> dict[str, Any]:
    """The catalog as JSON for `target`: local-search documents are copied beside it when at most
    `max_corpus_mb`, else referenced by absolute path (a known limit recorded in the model card)."""
    data = catalog.to_dict()
    for raw, entry in zip(data["tools"], catalog.tools, strict=True):
        if isinstance(entry.backend, LocalSearchBackend):
            source = catalog.resolve(entry.backend.documents).resolve()
            if source.is_dir() and _folder_size(source) <= max_corpus_mb * 1e6:
                shutil.copytree(source, target / "corpus" / entry.name, dirs_exist_ok=True)
                raw["backend"]["documents"] = f"corpus/{entry.name}"
            else:
                raw["backend"]["documents"] = str(source)
    return data


def prepare_bundle(checkpoint: str | Path, work: str | Path, *, max_corpus_mb: float = 64.0) -> dict[str, str]:
    """Write the two artifact folders for `checkpoint` under `work`; returns the pyfunc artifacts map."""
    import mlflow
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolorchestra.rl.checkpoint import load_catalog_of, read_manifest

    checkpoint, work = Path(checkpoint), Path(work)
    manifest = read_manifest(checkpoint)
    catalog = load_catalog_of(checkpoint)
    weights, orchestrator = work / WEIGHTS, work / ORCHESTRATOR
    for folder in (weights, orchestrator):
        if folder.exists():
            shutil.rmtree(folder)
    orchestrator.mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    mlflow.transformers.save_model(
        transformers_model={"model": model, "tokenizer": tokenizer}, path=str(weights), task="text-generation",
        pip_requirements=pip_requirements(),
    )
    atomic_write_json(orchestrator / CATALOG, bundle_catalog(catalog, orchestrator, max_corpus_mb=max_corpus_mb))
    atomic_write_json(orchestrator / MANIFEST, {**manifest, "weights_sha256": weights_sha256(checkpoint)})
    return {WEIGHTS: str(weights), ORCHESTRATOR: str(orchestrator)}


def load_bundle(artifacts: Mapping[str, str | Path], *, device: str = "auto", engine: str | None = None,
                cache_root: Path | None = None) -> tuple[Any, Catalog, dict[str, Any]]:
    """(policy LLM, catalog, manifest) from the artifact folders of a registered model; `engine`
    "llamacpp" runs the policy on llama.cpp from a GGUF cached under `cache_root`."""
    missing = [k for k in (WEIGHTS, ORCHESTRATOR) if k not in artifacts]
    if missing:
        raise ConfigError(None, f"not an orchestrator model: artifacts {missing} are missing", key="artifacts")
    orchestrator = Path(artifacts[ORCHESTRATOR])
    manifest = json.loads((orchestrator / MANIFEST).read_text(encoding="utf-8"))
    catalog = parse_catalog(json.loads((orchestrator / CATALOG).read_text(encoding="utf-8")),
                            source=orchestrator / CATALOG, base_dir=orchestrator.resolve())
    name = manifest.get("name", "orchestrator")
    if engine == "llamacpp":
        if cache_root is None:
            raise ConfigError(None, "the llama.cpp engine needs a cache folder for the GGUF", key="cache_root")
        return _on_llamacpp(Path(artifacts[WEIGHTS]), manifest, cache_root, name=name), catalog, manifest
    import mlflow

    from toolorchestra.llm.local import LocalLLM, resolve_device

    components = mlflow.transformers.load_model(str(artifacts[WEIGHTS]), return_type="components")
    model, tokenizer = components["model"], components["tokenizer"]
    target = resolve_device(device)
    if target.startswith("cuda"):
        import torch

        model = model.to(device=target, dtype=torch.bfloat16)
    llm = LocalLLM.from_model(model, tokenizer, name=name)
    return llm, catalog, manifest


def _on_llamacpp(weights: Path, manifest: Mapping[str, Any], cache_root: Path, *, name: str) -> Any:
    """The bundled weights on llama.cpp without loading them into torch: the GGUF is converted
    from the bundle's files once and found again by the manifest's weights hash (a process that
    loaded, re-saved and hashed 540 MB of weights at every `ask` now reads only the tokenizer)."""
    import tempfile

    from toolorchestra.llm.gguf_export import ensure_gguf
    from toolorchestra.llm.llamacpp import LlamaCppLLM

    model, tokenizer = weights / "model", weights / "components" / "tokenizer"  # mlflow.transformers' layout
    if not (model / "config.json").is_file() or not tokenizer.is_dir():
        raise ConfigError(weights, "not an MLflow transformers model: no model/config.json or components/tokenizer")
    known = manifest.get("weights_sha256")
    # namespaced: the bundle's files are a re-save of the checkpoint, not byte-identical to it
    digest = f"bundle-{known}" if isinstance(known, str) and known else None
    cache_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root) as tmp:  # the converter reads one folder: link both
        for part in (*model.iterdir(), *tokenizer.iterdir()):
            (Path(tmp) / part.name).symlink_to(part.resolve())
        gguf = ensure_gguf(tmp, cache_root, digest=digest)
    return LlamaCppLLM(gguf, tokenizer, name=name)


def policy_price(catalog: Catalog, manifest: Mapping[str, Any]) -> Any:
    """What the policy's own tokens cost: its catalog alias's price (free when it has none)."""
    from toolorchestra.tools.catalog import Price

    alias = manifest.get("policy_alias") or catalog.policy
    return catalog.models[alias].price if alias in catalog.models else Price()
