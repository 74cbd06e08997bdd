"""Configuration of an LLM backend, chosen by `kind`, and the factory that builds it.

Kinds: `local` (transformers on this machine), `llamacpp` (the same model as a GGUF through
llama.cpp, converted from the transformers folder and cached; fixed-weight work on the CPU) and
`openai` (an OpenAI-compatible endpoint). `engine_config(engine, model)` turns a stage's `engine`
parameter into the config of a local model, so stages choose the engine by configuration.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.secrets import approved_secret
from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM
from toolorchestra.llm.gguf_export import GGUFWeights
from toolorchestra.llm.llamacpp import N_CTX


class LocalLLMConfig(BaseModel):
    """A transformers model on this machine: `smollm2-135m-instruct` or a model folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"] = "local"
    model: str = "smollm2-135m-instruct"
    device: str = "auto"


class LlamaCppLLMConfig(BaseModel):
    """A local model through llama.cpp: `smollm2-135m-instruct` or a transformers model folder,
    converted to GGUF at `weights` precision on first use (cached by weights hash)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["llamacpp"] = "llamacpp"
    model: str = "smollm2-135m-instruct"
    weights: GGUFWeights = "f16"
    n_ctx: int = Field(N_CTX, ge=256, description="KV cells shared by the live sequences (one prompt + reply fits; "
                       "rows that outgrow them together are preempted)")
    n_batch: int = Field(512, ge=8, description="prompt tokens decoded per llama.cpp batch")
    n_threads: int = Field(1, ge=1, description="llama.cpp threads; more than the free cores stall (see llamacpp.py)")
    n_parallel: int = Field(16, ge=1, le=64, description="chats of a batch decoded together")


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
    max_concurrent: int = Field(16, ge=1, le=1024, description="requests a batch of chats keeps open at once")


LLMConfig = Annotated[LocalLLMConfig | LlamaCppLLMConfig | OpenAILLMConfig, Field(discriminator="kind")]
LocalEngine = Literal["transformers", "llamacpp"]
"""A stage's choice of engine for the local models it runs (the policy under evaluation, ...)."""
EngineChoice = Literal["auto", "transformers", "llamacpp"]
"""`ask`, `serve-model` and `calibrate`: an engine, or `auto` (`pick_engine`)."""


def pick_engine(engine: EngineChoice, device: str = "auto") -> LocalEngine:
    """`auto`: llama.cpp where the model would run on the CPU (fixed weights: its lockstep batches and
    prefix cache), transformers on a GPU."""
    if engine != "auto":
        return engine
    from toolorchestra.llm.local import resolve_device

    return "transformers" if resolve_device(device).startswith("cuda") else "llamacpp"


def engine_config(engine: LocalEngine, model: str, *, device: str = "auto") -> LocalLLMConfig | LlamaCppLLMConfig:
    """The backend config running the local `model` (an alias or a folder) on `engine`."""
    if engine == "llamacpp":
        return LlamaCppLLMConfig(model=model)
    return LocalLLMConfig(model=model, device=device)


def on_engine(config: LocalLLMConfig | LlamaCppLLMConfig | OpenAILLMConfig,
              engine: LocalEngine | None) -> LocalLLMConfig | LlamaCppLLMConfig | OpenAILLMConfig:
    """`config` with its local model run on `engine` (None: as configured); endpoints unchanged."""
    if engine is None or isinstance(config, OpenAILLMConfig):
        return config
    if engine == "llamacpp" and isinstance(config, LocalLLMConfig):
        return LlamaCppLLMConfig(model=config.model)
    if engine == "transformers" and isinstance(config, LlamaCppLLMConfig):
        return LocalLLMConfig(model=config.model)
    return config


def as_engine(llm: LLM, engine: LocalEngine | None, settings: Settings, **llamacpp: object) -> LLM:
    """A loaded transformers policy (`LocalLLM`: a checkpoint, a registered model) on `engine`:
    for `llamacpp` its weights are converted to GGUF once (cached by weights hash)."""
    from toolorchestra.llm.local import LocalLLM

    if engine != "llamacpp" or not isinstance(llm, LocalLLM):
        return llm
    from toolorchestra.llm.llamacpp import LlamaCppLLM

    return LlamaCppLLM.from_local(llm, settings.models_cache, **llamacpp)  # type: ignore[arg-type]


def _model_folder(model: str, settings: Settings) -> Path:
    """The transformers folder of a local model name (SmolLM2 is converted from its GGUF once)."""
    from toolorchestra.llm import smollm2

    if model == smollm2.NAME:
        return smollm2.ensure_converted(settings.models_cache)
    folder = Path(model).expanduser()
    return folder if folder.is_absolute() else settings.workspace / folder

_cache: dict[tuple, LLM] = {}
_cache_lock = threading.Lock()


def catalog_llms(models: Mapping[str, Any], engine: LocalEngine | None, settings: Settings, *,
                 replica: int = 0) -> Callable[[str], LLM]:
    """`llm_for(alias)` over a catalog's models (alias -> entry with a `backend`), each local model
    on a stage's `engine` (None: as the catalog says); `replica` as in `build_llm`."""
    def llm_for(alias: str) -> LLM:
        return build_llm(on_engine(models[alias].backend, engine), settings, replica=replica)

    return llm_for


def build_llm(config: LocalLLMConfig | LlamaCppLLMConfig | OpenAILLMConfig, settings: Settings, *,
              replica: int = 0) -> LLM:
    """Build (or reuse) the backend for `config`: one loaded local model per process and `replica`.
    Another replica of a llama.cpp model is another engine (its own context and KV cache; the GGUF's
    pages are shared): one engine decodes on one core at a time, so threads that should not wait for
    each other's calls (an evaluation's method workers) each take their own. Transformers models
    (whose one forward already uses every core) and endpoints ignore it."""
    api_key = None
    if isinstance(config, OpenAILLMConfig):
        # Only an allowed variable, and only to a host approved for it (core/secrets.py); checked
        # on every build, cached backend or not.
        api_key = approved_secret(config.api_key_env, config.base_url, settings=settings,
                                  key=f"{config.model}: api_key_env")
    key = (config, str(settings.models_cache), api_key is not None,
           replica if isinstance(config, LlamaCppLLMConfig) else 0)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        llm: LLM
        if isinstance(config, LocalLLMConfig):
            from toolorchestra.llm.local import LocalLLM

            llm = LocalLLM(_model_folder(config.model, settings), name=config.model, device=config.device)
        elif isinstance(config, LlamaCppLLMConfig):
            from toolorchestra.llm.gguf_export import ensure_gguf
            from toolorchestra.llm.llamacpp import LlamaCppLLM

            folder = _model_folder(config.model, settings)
            llm = LlamaCppLLM(ensure_gguf(folder, settings.models_cache, weights=config.weights), folder,
                              name=config.model, n_ctx=config.n_ctx, n_batch=config.n_batch,
                              n_threads=config.n_threads, n_parallel=config.n_parallel)
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
                max_concurrent=config.max_concurrent,
            )
        _cache[key] = llm
        return llm
