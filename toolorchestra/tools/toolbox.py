"""The toolbox: builds a catalog's tools and runs calls safely, with timing and pricing.

A single-model expert's description names its model (appended when the catalog's text does not),
so the policy can map a model-level preference ("do not ask smollm2-vote5") to the tool.

`Toolbox.call(name, arguments)` never raises for anything the model did or any tool failure: an
unknown tool, arguments that fail the JSON schema, a `ToolError`, an LLM endpoint that fails
after its retries, or an unexpected exception all come back as an error observation the model can
react to. Each call is timed and priced from the catalog: the tool's per-call and per-second
prices, plus the tokens of every model it used at that model's catalog price, plus every tool it
ran inside (an expert's program in the code interpreter) at that tool's per-call and per-second
prices: the same sandbox run costs the same whoever asks for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import jsonschema
from pydantic import BaseModel, Field

from toolorchestra.core.settings import Settings
from toolorchestra.llm.base import LLM, LLMError, Usage
from toolorchestra.tools.base import Tool, ToolError
from toolorchestra.tools.catalog import (
    Catalog,
    CodeInterpreterBackend,
    ExpertBackend,
    LocalSearchBackend,
    Price,
    ToolEntry,
    WebSearchBackend,
)
from toolorchestra.tools.experts import EpisodeContext, ExpertTool

MAX_OBSERVATION_CHARS = 4000


class CallResult(BaseModel):
    """The outcome of one tool call, as the agent loop records it."""

    observation: str
    ok: bool
    error: str | None = Field(None, description="error kind: unknown_tool, invalid_arguments, tool_error, llm_error, crash, repeated_call")
    cost_usd: float = 0.0
    latency_s: float = 0.0
    usage: dict[str, Usage] = Field(default_factory=dict)
    data: Any = None
    inner_calls: list[tuple[str, float]] = Field(default_factory=list)
    """Tools run inside this one, (name, seconds), each billed at that tool's price."""


def _truncate(text: str, limit: int = MAX_OBSERVATION_CHARS, *, keep_last_line: bool = False) -> str:
    """`text` cut to about `limit` characters from its head; with `keep_last_line` its last line
    stays too (a traceback's exception, a program's last printed value): cut from the head only,
    a failed program's "KeyError: no table 'plats'; tables: ..." never reached the policy."""
    if len(text) <= limit:
        return text
    last = text.rstrip("\n").rsplit("\n", 1)[-1][-limit // 2:] if keep_last_line else ""
    head = text[:max(0, limit - len(last))]
    cut = len(text) - len(head) - len(last)
    return f"{head}\n... [truncated {cut} characters]" + (f" ...\n{last}" if last else "")


class Toolbox:
    """Named tools with their prices; one per episode or shared (tools are stateless per call)."""

    def __init__(self, tools: Iterable[Tool], *, prices: dict[str, Price] | None = None,
                 model_prices: dict[str, Price] | None = None,
                 max_observation_chars: int = MAX_OBSERVATION_CHARS) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self.tools[tool.name] = tool
        self.prices = prices or {}
        self.model_prices = model_prices or {}
        self.max_observation_chars = max_observation_chars
        self._validators = {
            name: jsonschema.Draft202012Validator(tool.parameters) for name, tool in self.tools.items()
        }

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self.tools.values()]

    def price(self, tool: str, latency_s: float, usage: dict[str, Usage],
              inner_calls: Iterable[tuple[str, float]] = ()) -> float:
        price = self.prices.get(tool, Price())
        cost = price.per_call + price.per_second * latency_s
        for alias, used in usage.items():
            cost += self.model_prices.get(alias, Price()).tokens_cost(used)
        for inner, seconds in inner_calls:
            inner_price = self.prices.get(inner, Price())
            cost += inner_price.per_call + inner_price.per_second * seconds
        return cost

    def cost_bound(self, name: str, arguments: dict[str, Any], context: EpisodeContext | None = None) -> float:
        """What a call may cost before it runs (for a cost budget), USD: the tool's per-call price,
        and for an expert its model's prompt (over-estimated from the characters it will see) and
        `max_tokens` of output, times its samples for a vote expert, and the per-call price of the
        tool it runs inside. Per-second prices are unknowable up front and only charged after."""
        tool = self.tools.get(name)
        cost = self.prices.get(name, Price()).per_call
        if isinstance(tool, ExpertTool):
            for inner in tool.inner_tools():
                cost += self.prices.get(inner, Price()).per_call
            try:
                alias = tool.alias_for(arguments)
            except ToolError:
                return cost  # the call will fail before any model runs
            shown = (context.render() if context is not None else "") + str(arguments.get("question") or "")
            prompt = tool.llms[alias].count_prompt_tokens([{"role": "user", "content": shown}]) + 64  # + role prompt
            # A vote expert pays for every sample.
            usage = Usage(prompt_tokens=prompt * tool.samples, completion_tokens=tool.max_tokens * tool.samples)
            cost += self.model_prices.get(alias, Price()).tokens_cost(usage)
        return cost

    def call(self, name: str, arguments: dict[str, Any], context: EpisodeContext | None = None) -> CallResult:
        tool = self.tools.get(name)
        if tool is None:
            return CallResult(
                observation=f"Error: unknown tool {name!r}. Available tools: {', '.join(sorted(self.tools))}.",
                ok=False, error="unknown_tool",
            )
        problems = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            detail = "; ".join(
                f"{'/'.join(map(str, p.path)) or 'arguments'}: {p.message}" for p in problems[:3]
            )
            return CallResult(observation=f"Error: invalid arguments for {name!r}: {detail}.",
                              ok=False, error="invalid_arguments")
        started = time.perf_counter()
        usage: dict[str, Usage] = {}
        inner_calls: list[tuple[str, float]] = []
        try:
            if isinstance(tool, ExpertTool):
                output = tool.run_in_context(arguments, context)
            else:
                output = tool.run(arguments)
            usage, inner_calls = output.usage, output.inner_calls
            observation = _truncate(output.content, self.max_observation_chars, keep_last_line=tool.keep_last_line)
            result = CallResult(observation=observation, ok=output.ok, usage=usage,
                                data=output.data, error=None if output.ok else "tool_error", inner_calls=inner_calls)
        except ToolError as exc:
            result = CallResult(observation=f"Error: {name}: {exc}", ok=False, error="tool_error")
        except LLMError as exc:
            result = CallResult(observation=f"Error: {name}: model call failed: {exc}", ok=False, error="llm_error")
        except Exception as exc:  # a tool bug must not end the episode
            result = CallResult(observation=f"Error: {name} failed: {type(exc).__name__}: {exc}",
                                ok=False, error="crash")
        latency = time.perf_counter() - started
        result.latency_s = latency
        result.cost_usd = self.price(name, latency, usage, inner_calls)
        return result


class ModelsOnFirstUse(Mapping[str, LLM]):
    """An expert tool's models (alias -> backend), each built by `build(alias)` when a call first
    needs it; the aliases are known up front, so the tool's schema and description are unchanged."""

    def __init__(self, aliases: Iterable[str], build: Callable[[str], LLM]) -> None:
        self._aliases, self._build = list(dict.fromkeys(aliases)), build
        self._built: dict[str, LLM] = {}
        self._lock = threading.Lock()  # an episode batch calls its tools from several threads

    def __getitem__(self, alias: str) -> LLM:
        if alias not in self._aliases:
            raise KeyError(alias)
        with self._lock:
            if alias not in self._built:
                self._built[alias] = self._build(alias)
            return self._built[alias]

    def __contains__(self, alias: object) -> bool:  # Mapping's own would build the model to answer
        return alias in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._aliases)

    def __len__(self) -> int:
        return len(self._aliases)


def build_toolbox(
    catalog: Catalog,
    settings: Settings,
    *,
    llm_for: Callable[[str], LLM] | None = None,
    only: Iterable[str] | None = None,
    max_observation_chars: int = MAX_OBSERVATION_CHARS,
    models_on_first_use: bool = False,
) -> Toolbox:
    """Instantiate the catalog's tools (or those named in `only`); observations are cut at
    `max_observation_chars` (a trained policy's own limit: `registry.policy.observation_chars`).

    `llm_for(alias)` returns the backend of a catalog model; by default it is built from the
    catalog's backend config (local models are loaded once per process). With
    `models_on_first_use` an expert's models are built when a call first asks them
    (`ModelsOnFirstUse`): for a one-question run (`orchestra ask`), where most episodes ask no
    expert and a llama.cpp engine takes ~1.3 s to load. Stages and the server build them up front,
    so a model that cannot load stops them before the first episode, not as a tool error in it.
    """
    from toolorchestra.llm.config import build_llm

    if llm_for is None:
        def llm_for(alias: str) -> LLM:
            return build_llm(catalog.models[alias].backend, settings)

    wanted = set(only) if only is not None else {t.name for t in catalog.tools}
    unknown = wanted - {t.name for t in catalog.tools}
    if unknown:
        raise ValueError(f"tools {sorted(unknown)} are not in the catalog; known: {[t.name for t in catalog.tools]}")
    built: dict[str, Tool] = {}

    def build(entry: ToolEntry) -> Tool:
        if entry.name in built:
            return built[entry.name]
        backend = entry.backend
        tool: Tool
        if isinstance(backend, CodeInterpreterBackend):
            from toolorchestra.tools.code_interpreter import CodeInterpreter, SandboxLimits

            tool = CodeInterpreter(limits=SandboxLimits(
                wall_time_s=backend.wall_time_s, memory_mb=backend.memory_mb,
                max_output_bytes=backend.max_output_bytes), final_answer_line=backend.final_answer_line)
        elif isinstance(backend, LocalSearchBackend):
            from toolorchestra.tools.local_search import LocalSearch, LocalSearchConfig

            tool = LocalSearch.from_config(LocalSearchConfig(
                docs_dir=catalog.resolve(backend.documents), cache_dir=settings.state / "search-index",
                embedder=backend.embedder, chunk_chars=backend.chunk_chars,
                chunk_overlap=backend.chunk_overlap, lexical=backend.lexical))
        elif isinstance(backend, WebSearchBackend):
            from toolorchestra.tools.web_search import WebSearch, WebSearchConfig

            tool = WebSearch(WebSearchConfig(api_key_env=backend.api_key_env, base_url=backend.base_url,
                                             timeout_s=backend.timeout_s))
        elif isinstance(backend, ExpertBackend):
            helpers: dict[str, Tool] = {}
            if backend.role in ("reason", "program"):
                code_entry = catalog.code_tool()
                helpers["run_code"] = build(code_entry) if code_entry else _default_code_interpreter()
            if backend.role == "search":
                helpers["retrieval"] = build(catalog.tool(backend.retrieval or ""))
            tool = ExpertTool(entry.name, entry.description, backend.role,
                              (ModelsOnFirstUse(backend.models, llm_for) if models_on_first_use
                               else {alias: llm_for(alias) for alias in backend.models}),
                              max_tokens=backend.max_tokens, parameters=entry.parameters,
                              samples=backend.samples, temperature=backend.temperature, **helpers)
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"unsupported backend {backend!r}")
        tool.name = entry.name  # the catalog's name, which prices and offers the tool
        if entry.description:
            tool.description = entry.description
        if isinstance(tool, ExpertTool) and tool.fixed_alias and tool.fixed_alias not in tool.description:
            # the policy reads which model a tool asks (a "do not ask <model>" preference needs it)
            tool.description = f"{tool.description.rstrip()} Model: {tool.fixed_alias}.".lstrip()
        if entry.parameters and not isinstance(tool, ExpertTool):
            tool.parameters = entry.parameters
        built[entry.name] = tool
        return tool

    tools = [build(catalog.tool(name)) for name in [t.name for t in catalog.tools if t.name in wanted]]
    return Toolbox(
        tools,
        prices=catalog.tool_prices(),
        model_prices=catalog.model_prices(),
        max_observation_chars=max_observation_chars,
    )


def _default_code_interpreter() -> Tool:
    from toolorchestra.tools.code_interpreter import CodeInterpreter

    return CodeInterpreter()
