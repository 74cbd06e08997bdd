"""A git + DVC workspace laid out like the project, with tiny parameters, and one Prefect harness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from workspaces import REPO, make_project_workspace

TINY = {
    "synthesize": {"domains": ["library"], "db_size": 12, "tasks_per_domain": 6, "qa_per_domain": 4},
    "describe": {"measure": {"samples_per_category": 1, "categories": ["qa_numeric", "qa_lookup"],
                             "max_turns": 2, "max_tokens": 32, "max_workers": 1}},
    # train: a random-weight model of SmolLM2's architecture (see tiny_base_model) so the flow
    # exercises SFT + GRPO + export in seconds; the real SmolLM2 trains in tests/toolorchestra/rl.
    "train": {"device": "cpu", "data": {"kinds": ["tool_use"], "max_instances": 2, "max_actions": 3},
              "episode": {"max_turns": 2, "max_tokens": 16, "max_domain_tools": 3},
              "sft": {"steps": 1, "batch_size": 2, "max_examples": 2},
              "grpo": {"steps": 1, "num_generations": 2, "max_completion_length": 128}},
    "evaluate": {"benchmarks": [{"name": "toolscale", "kind": "toolscale", "max_tasks": 1},
                                {"name": "qa", "kind": "qa", "max_tasks": 1},
                                {"name": "preferences", "kind": "preferences", "max_tasks": 1}],
                 "episode": {"max_turns": 2, "max_tokens": 16, "max_domain_tools": 3}, "device": "cpu",
                 "tools": ["answer", "code_interpreter"]},
    # The random-weight candidate is as accurate as anything on one task (0%): the gate passes
    # on a first promotion, which is what the flow test checks.
    "promote": {"gate": {"accuracy_tolerance": 0.05, "max_cost_ratio": 1.25, "min_format_valid_rate": 0.0}},
}


def tiny_base_model(folder: Path) -> Path:
    """A random-weight Llama with SmolLM2's tokenizer and chat template, saved once per folder."""
    if (folder / "config.json").is_file():
        return folder
    from tiny_models import tiny_llama
    from transformers import AutoTokenizer

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.smollm2 import ensure_converted

    tokenizer = AutoTokenizer.from_pretrained(ensure_converted(Settings(workspace=REPO).models_cache))
    tiny_llama(tokenizer, max_position_embeddings=8192).save_pretrained(folder)  # flow prompts exceed 2,048
    tokenizer.save_pretrained(folder)
    return folder


def make_workspace(root: Path, overrides: dict | None = None) -> Path:
    tiny = {**TINY, "train": {**TINY["train"], "base_model": str(tiny_base_model(root.parent / "tiny-base"))}}
    return make_project_workspace(root, {**tiny, **(overrides or {})})


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)
    return make_workspace(tmp_path / "ws")


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
