"""A git + DVC workspace laid out like the project, on the CPU toy profile (params/tiny.yaml), and one
Prefect harness."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.workspaces import REPO, TINY_PROFILE, make_project_workspace


def tiny_base_model(folder: Path) -> Path:
    """A random-weight Llama with SmolLM2's tokenizer and chat template, saved once per folder."""
    if (folder / "config.json").is_file():
        return folder
    from helpers.tiny_models import tiny_llama
    from transformers import AutoTokenizer

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.smollm2 import ensure_converted

    tokenizer = AutoTokenizer.from_pretrained(ensure_converted(Settings(workspace=REPO).models_cache))
    tiny_llama(tokenizer, max_position_embeddings=8192).save_pretrained(folder)  # flow prompts exceed 2,048
    tokenizer.save_pretrained(folder)
    return folder


def make_workspace(root: Path) -> Path:
    """The toy profile with a random-weight model of SmolLM2's architecture as the base model, so
    the flow exercises SFT + GRPO + export in seconds (the real SmolLM2 trains in
    tests/toolorchestra/rl)."""
    base_model = {"train": {"base_model": str(tiny_base_model(root.parent / "tiny-base"))}}
    return make_project_workspace(root, base_model, profile=TINY_PROFILE)


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
