"""Configuration of an LLM backend, chosen by `kind`, and the factory that builds it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.secrets import approved_secret
from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM


class LocalLLMConfig(BaseModel):
    """A transformers model on this machine: `smollm2-135m-instruct` or a model folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"] = "local"
    model: str = "smollm2-135m-instruct"
    device: str = "auto"


class OpenAILLMConfig(BaseModel):
    """An OpenAI-compatible endpoint. The key comes from the environment variable `api_key_env`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai"] = "openai"
    model: str
    base_url: str | None = None
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = Field(30.0, gt=0, le=3600, description="seconds per attempt")
    max_attempts: int = Field(4, ge=1, le=20)
    backoff_s: float = Field(0.5, ge=0, le=60)
    max_total_s: float = Field(60.0, gt=0, le=7200, description="seconds per call, retries included")


LLMConfig = Annotated[LocalLLMConfig | OpenAILLMConfig, Field(discriminator="kind")]

_cache: dict[tuple, LLM] = {}
_cache_lock = threading.Lock()


def build_llm(config: LocalLLMConfig | OpenAILLMConfig, settings: Settings) -> LLM:
    """Build (or reuse) the backend for `config`: one loaded local model per process."""
    api_key = None
    if isinstance(config, OpenAILLMConfig):
        # Only an allowed variable, and only to a host approved for it (core/secrets.py); checked
        # on every build, cached backend or not.
        api_key = approved_secret(config.api_key_env, config.base_url, settings=settings,
                                  key=f"{config.model}: api_key_env")
    key = (config, str(settings.models_cache), api_key is not None)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        llm: LLM
        if isinstance(config, LocalLLMConfig):
            from toolorchestra.llm import smollm2
            from toolorchestra.llm.local import LocalLLM

            if config.model == smollm2.NAME:
                folder = smollm2.ensure_converted(settings.models_cache)
            else:
                folder = Path(config.model).expanduser()
                if not folder.is_absolute():
                    folder = settings.workspace / folder
            llm = LocalLLM(folder, name=config.model, device=config.device)
        else:
            from toolorchestra.llm.openai_backend import OpenAILLM

            llm = OpenAILLM(
                config.model,
                base_url=config.base_url,
                api_key=api_key,
                timeout_s=config.timeout_s,
                max_attempts=config.max_attempts,
                backoff_s=config.backoff_s,
                max_total_s=config.max_total_s,
            )
        _cache[key] = llm
        return llm
