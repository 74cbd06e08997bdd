"""Checkpoint folders: written completely, loaded back as a working orchestrator."""

from __future__ import annotations

import json

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.rl.checkpoint import (
    checkpoint_step,
    last_checkpoint,
    load_catalog_of,
    load_orchestrator,
    read_manifest,
    save_checkpoint,
)
from toolorchestra.tools.catalog import LocalSearchBackend, load_embedded_catalog


def test_save_and_load_round_trip(tiny_llm, tmp_path):
    catalog = load_embedded_catalog()
    folder = save_checkpoint(tiny_llm.lm, tiny_llm.tokenizer, tmp_path / "models" / "orchestrator",
                             catalog=catalog, manifest={"name": "orchestrator", "steps": {"grpo": 2}})
    llm, loaded, manifest = load_orchestrator(folder, device="cpu")
    assert manifest["steps"] == {"grpo": 2} and manifest["format"] == 1
    assert llm.tokenizer.eos_token == "<|im_end|>" and "tool_call" in llm.tokenizer.chat_template
    reply = llm.chat([{"role": "user", "content": "hi"}], max_tokens=3)
    assert reply.usage.completion_tokens >= 1
    # Relative corpus paths still point at the same documents from the checkpoint folder.
    search = next(t for t in loaded.tools if isinstance(t.backend, LocalSearchBackend))
    original = next(t for t in catalog.tools if isinstance(t.backend, LocalSearchBackend))
    assert loaded.resolve(search.backend.documents).resolve() == catalog.resolve(original.backend.documents).resolve()
    assert [t.name for t in load_catalog_of(folder).tools] == [t.name for t in catalog.tools]


def test_manifest_errors(tmp_path):
    with pytest.raises(ConfigError, match="not an orchestrator checkpoint"):
        read_manifest(tmp_path)
    (tmp_path / "orchestrator.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(ConfigError, match="unsupported checkpoint format 99"):
        read_manifest(tmp_path)


def test_last_checkpoint_skips_incomplete_ones(tmp_path):
    assert last_checkpoint(tmp_path / "nothing") is None
    for step, complete in ((1, True), (3, True), (5, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "checkpoint-x").mkdir()
    found = last_checkpoint(tmp_path)
    assert found == tmp_path / "checkpoint-3" and checkpoint_step(found) == 3
