"""The trained orchestrator on disk (`models/orchestrator/`), and where an interrupted run resumes.

A checkpoint folder holds everything needed to run the orchestrator again:

- the model as safetensors (`config.json`, `model.safetensors`, `generation_config.json`);
- the tokenizer with its chat template (`chat_template.jinja`: the tools-aware ChatML one);
- `catalog.json`: the tool catalog it was trained with (relative paths rewritten to resolve from
  the checkpoint folder);
- `orchestrator.json`: the manifest (format, base model, backend, steps, episode settings, the
  system prompt, the policy's catalog alias, final metrics).

`load_orchestrator(folder)` returns the policy (`LocalLLM`), the catalog and the manifest.

Resuming: TRL/transformers checkpoints (weights, optimiser, scheduler, RNG, trainer state) are
written every `save_steps` into a *work folder* under the state directory, keyed by a hash of
everything that determines the run except its length (`run_key`), not into the stage's output
(which DVC deletes before a run and the stage runner stages atomically). A run that is killed and
started again with the same configuration and inputs finds its last checkpoint there and
continues from that step; asking for more steps with an unchanged configuration extends it.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.fs import atomic_write_json
from toolorchestra.tools.catalog import Catalog, LocalSearchBackend, parse_catalog

MANIFEST = "orchestrator.json"
CATALOG = "catalog.json"
FORMAT = 1


def catalog_dict(catalog: Catalog, folder: Path) -> dict[str, Any]:
    """The catalog as JSON whose relative document paths resolve from `folder`."""
    data = catalog.to_dict()
    for raw, entry in zip(data["tools"], catalog.tools, strict=True):
        if isinstance(entry.backend, LocalSearchBackend) and not os.path.isabs(entry.backend.documents):
            target = os.path.abspath(catalog.resolve(entry.backend.documents))
            raw["backend"]["documents"] = os.path.relpath(target, os.path.abspath(folder))
    return data


def save_checkpoint(model: Any, tokenizer: Any, folder: Path, *, catalog: Catalog, manifest: dict[str, Any]) -> Path:
    """Write the model, tokenizer (with chat template), catalog and manifest into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    if not (folder / "chat_template.jinja").exists() and tokenizer.chat_template:
        (folder / "chat_template.jinja").write_text(tokenizer.chat_template, encoding="utf-8")
    atomic_write_json(folder / CATALOG, catalog_dict(catalog, folder))
    atomic_write_json(folder / MANIFEST, {"format": FORMAT, "created": datetime.now(UTC).isoformat(), **manifest})
    return folder


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ConfigError(folder, f"not an orchestrator checkpoint (no {MANIFEST})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(path, f"not JSON: {exc.msg}") from None
    if data.get("format") != FORMAT:
        raise ConfigError(path, f"unsupported checkpoint format {data.get('format')!r}; expected {FORMAT}")
    return data


def load_catalog_of(folder: str | Path) -> Catalog:
    path = Path(folder) / CATALOG
    if not path.is_file():
        raise ConfigError(folder, f"checkpoint has no {CATALOG}")
    return parse_catalog(json.loads(path.read_text(encoding="utf-8")), source=path, base_dir=path.parent.resolve())


def load_orchestrator(folder: str | Path, *, device: str = "auto") -> tuple[Any, Catalog, dict[str, Any]]:
    """(policy LLM, catalog, manifest) of a checkpoint folder."""
    from toolorchestra.llm.local import LocalLLM

    manifest = read_manifest(folder)
    return LocalLLM(folder, name=manifest.get("name", "orchestrator"), device=device), load_catalog_of(folder), manifest


def run_key(*parts: Any) -> str:
    """A short stable hash of what determines a run (configuration without its length, inputs)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def last_checkpoint(folder: Path) -> Path | None:
    """The newest complete `checkpoint-N` in a trainer output folder, if any."""
    if not folder.is_dir():
        return None
    found = []
    for child in folder.iterdir():
        name = child.name
        if child.is_dir() and name.startswith("checkpoint-") and name[11:].isdigit():
            if (child / "trainer_state.json").is_file():  # written last by transformers: complete
                found.append((int(name[11:]), child))
    return max(found)[1] if found else None


def checkpoint_step(checkpoint: Path) -> int:
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    return int(state.get("global_step", 0))
