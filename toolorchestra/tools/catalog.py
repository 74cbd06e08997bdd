"""The tool catalog: every tool and model the orchestrator may use, with prices and latencies.

A catalog is a YAML (or JSON) file:

    models:                      # aliases the LLM tools can route to
      smollm2: {backend: {kind: local}, price: {input_per_mtok: 0.02, output_per_mtok: 0.02}}
    policy: smollm2              # the default orchestrator model (an alias above)
    tools:
      - name: code_interpreter
        kind: code               # search | code | domain | llm (the paper's categories)
        backend: {type: code_interpreter, wall_time_s: 10}
        price: {per_call: 0.0001}
        latency_s: 0.3

Prices live here and only here: tools report tokens per model alias, the toolbox prices them.
Secrets never do: `api_key_env` names an environment variable, which must be one the user allowed
in the settings (`ORCHESTRA_CREDENTIAL_HOSTS`), and its value goes only to the hosts approved for it
(`toolorchestra/core/secrets.py`). A tool's `parameters` must be a valid JSON Schema.
Relative paths inside a catalog (e.g. a search corpus) resolve against the catalog file's folder.
"""

from __future__ import annotations

import json
import logging
import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.secrets import check_key_name
from toolorchestra.core.settings import Settings, load_settings
from toolorchestra.llm.base import Usage
from toolorchestra.llm.config import LLMConfig, LocalLLMConfig
from toolorchestra.tools.embeddings import EmbedderConfig, LocalEmbedderConfig

log = logging.getLogger(__name__)

_STRICT = ConfigDict(extra="forbid", frozen=True)


class Price(BaseModel):
    """USD prices. Tokens are priced per million, like every provider's price list."""

    model_config = _STRICT

    input_per_mtok: float = Field(0.0, ge=0)
    output_per_mtok: float = Field(0.0, ge=0)
    per_call: float = Field(0.0, ge=0)
    per_second: float = Field(0.0, ge=0)
    cached_input_per_mtok: float | None = Field(None, ge=0, description=(
        "a prompt token that repeats the episode's own previous turn (a prefix cache keeps it; "
        "providers bill such 'cached input' at about a tenth); None: the input price"))

    @model_validator(mode="after")
    def _cached_not_dearer(self) -> Price:
        if self.cached_input_per_mtok is not None and self.cached_input_per_mtok > self.input_per_mtok:
            raise ValueError("cached_input_per_mtok cannot exceed input_per_mtok")
        return self

    def tokens_cost(self, usage: Usage, reused_prompt_tokens: int = 0) -> float:
        """USD for `usage`; the first `reused_prompt_tokens` of its prompt (at most all of it) at the
        cached input price. Which tokens count as reused is the caller's stated rule
        (`toolorchestra.agent.trajectory.reused_prompt_tokens`), not the engine's cache hits."""
        reused = min(max(reused_prompt_tokens, 0), usage.prompt_tokens)
        cached = self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok
        return ((usage.prompt_tokens - reused) * self.input_per_mtok + reused * cached
                + usage.completion_tokens * self.output_per_mtok) / 1e6


class ModelEntry(BaseModel):
    model_config = _STRICT

    backend: LLMConfig = Field(default_factory=LocalLLMConfig)
    price: Price = Price()
    latency_s: float = Field(1.0, ge=0, description="typical seconds per call")
    description: str = ""


class CodeInterpreterBackend(BaseModel):
    model_config = _STRICT

    type: Literal["code_interpreter"] = "code_interpreter"
    wall_time_s: float = Field(10.0, gt=0)
    memory_mb: int = Field(512, ge=64, le=65_536)
    max_output_bytes: int = Field(8000, ge=256, le=10_000_000)
    final_answer_line: bool = Field(False, description=(
        "a run that succeeds and prints one line holding a value (a number or short text; not None, "
        "not a list or dict) ends the task with that line as the answer, as an `ask_program` run does"))


class LocalSearchBackend(BaseModel):
    model_config = _STRICT

    type: Literal["local_search"] = "local_search"
    documents: str = Field(description="folder of .txt/.md/.jsonl documents")
    embedder: EmbedderConfig = Field(default_factory=LocalEmbedderConfig)
    chunk_chars: int = Field(800, ge=50, le=1_000_000)
    chunk_overlap: int = Field(100, ge=0, le=1_000_000)
    lexical: bool = Field(True, description="fuse BM25's word ranking with the embedding's (false: dense only)")


class WebSearchBackend(BaseModel):
    model_config = _STRICT

    type: Literal["web_search"] = "web_search"
    api_key_env: str = "TAVILY_API_KEY"
    base_url: str = "https://api.tavily.com"
    timeout_s: float = Field(15.0, gt=0)


class ExpertBackend(BaseModel):
    """An LLM used as a tool (roles: `toolorchestra.tools.experts`).

    With several `models` the call's `model` argument picks one (the paper's form); with exactly
    one, the tool has no `model` argument and always asks it. Roles: `answer` (the expert answers;
    ends the episode), `program` (the expert writes Python, the code interpreter runs it, its
    printed answer ends the episode), `vote` (`samples` answers at `temperature`, majority vote;
    ends the episode), `reason` (`enhance_reasoning`: the expert writes Python that the code
    interpreter runs), `search` (the expert writes a query for the `retrieval` tool), `ask` (a
    plain question to the expert).
    """

    model_config = _STRICT

    type: Literal["expert"] = "expert"
    role: Literal["answer", "program", "vote", "reason", "search", "ask"]
    models: list[str] = Field(min_length=1)
    retrieval: str | None = Field(None, description="name of the search tool a `search` expert queries")
    max_tokens: int = Field(256, ge=1, le=131_072)
    samples: int = Field(5, ge=1, le=64, description="`vote`: answers sampled per call")
    temperature: float = Field(0.7, ge=0, le=2, description="`vote`: sampling temperature")

    @property
    def samples_per_call(self) -> int:
        """Model calls one tool call makes (a vote's samples; 1 for every other role)."""
        return self.samples if self.role == "vote" else 1

    @model_validator(mode="after")
    def _vote_samples_differ(self) -> ExpertBackend:
        if self.role == "vote" and self.samples > 1 and self.temperature <= 0:
            raise ValueError("a `vote` expert with several samples needs temperature > 0 (greedy samples are identical)")
        return self


ToolBackend = Annotated[
    CodeInterpreterBackend | LocalSearchBackend | WebSearchBackend | ExpertBackend,
    Field(discriminator="type"),
]


class ToolEntry(BaseModel):
    model_config = _STRICT

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    kind: Literal["search", "code", "domain", "llm"]
    description: str = ""
    backend: ToolBackend
    parameters: dict[str, Any] | None = Field(None, description="JSON schema; default: the backend's")
    price: Price = Price()
    latency_s: float = Field(0.5, ge=0)
    stats: dict[str, Any] = Field(default_factory=dict, description="measured behaviour (describe stage)")

    @field_validator("parameters")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A broken schema fails here, when the catalog loads, not at the first call."""
        if value is not None:
            import jsonschema

            try:
                jsonschema.Draft202012Validator.check_schema(value)
            except jsonschema.SchemaError as exc:
                where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
                raise ValueError(f"not a valid JSON Schema at {where}: {exc.message}") from None
        return value


class Catalog(BaseModel):
    model_config = _STRICT

    models: dict[str, ModelEntry] = Field(default_factory=dict)
    policy: str | None = Field(None, description="default orchestrator model alias")
    tools: list[ToolEntry] = Field(default_factory=list)
    base_dir: Path | None = Field(None, exclude=True, description="folder relative paths resolve against")

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate tool names {duplicates}: each tool needs a unique name")
        if self.policy is not None and self.policy not in self.models:
            raise ValueError(f"policy {self.policy!r} is not a model alias; known: {sorted(self.models)}")
        for tool in self.tools:
            backend = tool.backend
            if isinstance(backend, ExpertBackend):
                missing = [m for m in backend.models if m not in self.models]
                if missing:
                    raise ValueError(
                        f"tool {tool.name!r} routes to unknown models {missing}; known: {sorted(self.models)}"
                    )
                if backend.role == "search" and backend.retrieval not in names:
                    raise ValueError(
                        f"tool {tool.name!r} is a search expert: set `retrieval` to one of {names}"
                    )
        return self

    def tool(self, name: str) -> ToolEntry:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(name)

    def tool_prices(self) -> dict[str, Price]:
        """Each tool's catalog price, by tool name."""
        return {t.name: t.price for t in self.tools}

    def model_prices(self) -> dict[str, Price]:
        """Each model's catalog price, by alias."""
        return {alias: m.price for alias, m in self.models.items()}

    def code_tool(self) -> ToolEntry | None:
        """The code-interpreter tool that `program` and `reason` experts run their code in."""
        return next((t for t in self.tools if isinstance(t.backend, CodeInterpreterBackend)), None)

    def inner_tools(self, entry: ToolEntry) -> list[str]:
        """Catalog tools a call of `entry` runs inside and is billed for at their prices (a
        `program`/`reason` expert's code-interpreter run, a `search` expert's retrieval)."""
        backend = entry.backend
        if not isinstance(backend, ExpertBackend):
            return []
        if backend.role in ("program", "reason"):
            code = self.code_tool()
            return [code.name] if code is not None else []
        if backend.role == "search" and backend.retrieval:
            return [backend.retrieval]
        return []

    def resolve(self, path: str) -> Path:
        candidate = Path(path).expanduser()
        if candidate.is_absolute() or self.base_dir is None:
            return candidate
        return Path(os.path.normpath(self.base_dir / candidate))

    def subset(self, names: list[str]) -> Catalog:
        """The catalog restricted to some tools (models kept)."""
        return self.model_copy(update={"tools": [t for t in self.tools if t.name in set(names)]})

    def with_search_corpus(self, folder: Path) -> Catalog:
        """The catalog with every local-search tool indexing `folder` (e.g. a pipeline's records)."""
        documents = os.path.relpath(folder, self.base_dir) if self.base_dir else str(folder)
        return self._with_backends(LocalSearchBackend, documents=documents)

    def with_final_answer_line(self, on: bool) -> Catalog:
        """The catalog with every code-interpreter backend's `final_answer_line` set to `on`."""
        return self._with_backends(CodeInterpreterBackend, final_answer_line=on)

    def _with_backends(self, kind: type[BaseModel], **fields: Any) -> Catalog:
        """The catalog with `fields` set on every tool backend of type `kind`."""
        tools = [t.model_copy(update={"backend": t.backend.model_copy(update=fields)})
                 if isinstance(t.backend, kind) else t for t in self.tools]
        return self.model_copy(update={"tools": tools})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _first_error(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return loc or "<root>", f"{err['msg']}{more}"


def parse_catalog(data: Any, *, source: str | Path, base_dir: Path | None = None) -> Catalog:
    if not isinstance(data, dict):
        raise ConfigError(source, f"a catalog must be a mapping with `models` and `tools`, got {type(data).__name__}")
    try:
        catalog = Catalog.model_validate({**data, "base_dir": base_dir})
    except ValidationError as exc:
        key, reason = _first_error(exc)
        raise ConfigError(source, reason, key=key) from None
    check_catalog_keys(catalog, source=source)
    warn_if_unpriced(catalog, source=source)
    return catalog


def warn_if_unpriced(catalog: Catalog, *, source: str | Path) -> bool:
    """A catalog with models or tools but no price anywhere makes every cost $0 (and the cost
    term of the reward meaningless): say so once, at load, rather than run at $0 silently."""
    entries = [m.price for m in catalog.models.values()] + [t.price for t in catalog.tools]
    if not entries or any(any(p.model_dump().values()) for p in entries):
        return False
    log.warning("%s: no model or tool has a price; every cost will be reported as $0 "
                "(set `price` on the entries the orchestrator should pay for)", source)
    return True


def key_variables(catalog: Catalog) -> dict[str, str]:
    """Every `api_key_env` the catalog names, by its key path in the file."""
    names: dict[str, str] = {}
    for alias, model in catalog.models.items():
        env = getattr(model.backend, "api_key_env", None)
        if env:
            names[f"models.{alias}.backend.api_key_env"] = env
    for i, tool in enumerate(catalog.tools):
        backend = tool.backend
        if isinstance(backend, WebSearchBackend) and backend.api_key_env:
            names[f"tools.{i}.backend.api_key_env"] = backend.api_key_env
        if isinstance(backend, LocalSearchBackend) and getattr(backend.embedder, "api_key_env", None):
            names[f"tools.{i}.backend.embedder.api_key_env"] = backend.embedder.api_key_env
    return names


def check_catalog_keys(catalog: Catalog, *, source: str | Path, settings: Settings | None = None) -> None:
    """Each key variable the catalog names is one the user allowed (see `core/secrets.py`)."""
    settings = settings or load_settings()
    for key, env in key_variables(catalog).items():
        check_key_name(env, settings=settings, file=str(source), key=key)


def load_catalog(path: str | Path) -> Catalog:
    """Load and validate a catalog file; any problem is a one-line `ConfigError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, f"cannot read catalog: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            reason = f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {getattr(exc, 'problem', reason)}"
        raise ConfigError(path, reason) from None
    return parse_catalog(data, source=path, base_dir=path.parent.resolve())


def embedded_catalog_path() -> Path:
    return Path(str(resources.files("toolorchestra.tools").joinpath("catalogs/embedded.yaml")))


def load_embedded_catalog() -> Catalog:
    return load_catalog(embedded_catalog_path())
