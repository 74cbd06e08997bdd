"""Suite-wide test settings: no telemetry, no hub downloads, deterministic threads; `gpu` tests skip
without CUDA."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

for _key, _value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "RAY_USAGE_STATS_ENABLED": "0",
}.items():
    os.environ.setdefault(_key, _value)

REPO = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked `gpu` skip (with the reason) where CUDA is not available; elsewhere they run."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (marked gpu); torch.cuda.is_available() is False here")
    for item in gpu:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The real SmolLM2-135M-Instruct as a transformers folder (converted once, then cached in
    the repo's git-ignored state folder, as a user's first run does)."""
    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.smollm2 import ensure_converted

    return ensure_converted(Settings(workspace=REPO).models_cache)


@pytest.fixture(scope="session")
def tiny_llm(smollm2_dir: Path):
    """A random-weight model of SmolLM2's architecture (Llama) with the real tokenizer and chat
    template: fast, and exercises the same code paths as the real model."""
    from helpers.tiny_models import tiny_llama
    from transformers import AutoTokenizer

    from toolorchestra.llm.local import LocalLLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return LocalLLM.from_model(tiny_llama(tokenizer), tokenizer, name="tiny-llama")
