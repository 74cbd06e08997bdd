"""The `web_search` tool: Tavily's search API (POST {base_url}/search) over httpx.

The API key is read from an environment variable (default `TAVILY_API_KEY`) at call time and sent
as `Authorization: Bearer <key>`, as Tavily's API reference specifies. Without a key the tool
raises `ToolError` naming the variable to set: it never makes up results. HTTP 429, 5xx,
connection errors and timeouts are retried with exponential backoff (tenacity); other HTTP errors
fail at once. The key never appears in logs or error text: messages are built from status codes
and the response body with the key masked out.

`base_url` is configurable so a Tavily-compatible proxy (or a test server) can stand in.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from toolorchestra.core.errors import ConfigError
from toolorchestra.core.secrets import approved_secret
from toolorchestra.tools.base import Tool, ToolError, ToolOutput

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


class WebSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = "https://api.tavily.com"
    api_key_env: str = "TAVILY_API_KEY"
    """Name of the environment variable holding the key (the key itself never goes in config)."""
    timeout_s: float = Field(default=20.0, gt=0)
    max_attempts: int = Field(default=3, ge=1)
    backoff_initial_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=10.0, ge=0)
    search_depth: Literal["basic", "advanced"] = "basic"
    topic: Literal["general", "news", "finance"] = "general"
    include_answer: bool = False
    """Ask Tavily for its own LLM-written answer (shown first in the observation)."""
    max_results_limit: int = Field(default=10, ge=1, le=20)
    """Upper bound of the `max_results` argument (Tavily accepts up to 20)."""
    max_content_chars: int = Field(default=800, ge=50)
    """Longest snippet shown per result."""


class _RetryableHTTPError(Exception):
    """A 429/5xx answer, raised inside the retry loop so tenacity tries again."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.detail = detail


def _retryable(exc: BaseException) -> bool:
    # TransportError covers connection failures and timeouts (connect, read, write, pool).
    return isinstance(exc, _RetryableHTTPError | httpx.TransportError)


class WebSearch(Tool):
    """Web search through Tavily."""

    name = "web_search"

    def __init__(self, config: WebSearchConfig | None = None, *, description: str | None = None) -> None:
        self.config = config or WebSearchConfig()
        self.description = description or (
            "Search the web. Returns result titles, URLs and content snippets; use it for facts "
            "that are recent or missing from the local documents."
        )
        self.parameters = {
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "The search query."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": self.config.max_results_limit,
                                "default": 5, "description": "How many results to return."},
            },
            "required": ["query"],
            "additionalProperties": False,
        }

    @property
    def endpoint(self) -> str:
        return self.config.base_url.rstrip("/") + "/search"

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        query = arguments.get("query")
        max_results = arguments.get("max_results", 5)
        limit = self.config.max_results_limit
        if not isinstance(query, str) or not query.strip():
            raise ToolError("web_search needs a non-empty string argument `query`")
        if not isinstance(max_results, int) or isinstance(max_results, bool) or not 1 <= max_results <= limit:
            raise ToolError(f"web_search argument `max_results` must be an integer from 1 to {limit}, "
                            f"got {max_results!r}")
        try:  # an allowed variable, sent only to a host approved for it (core/secrets.py)
            key = (approved_secret(self.config.api_key_env, self.config.base_url,
                                   key="web_search.api_key_env") or "").strip()
        except ConfigError as exc:
            raise ToolError(f"web search: {exc.reason}") from None
        if not key:
            raise ToolError(f"web search is not configured: set the environment variable "
                            f"{self.config.api_key_env} to a Tavily API key")
        payload = {
            "query": query.strip(),
            "max_results": max_results,
            "search_depth": self.config.search_depth,
            "topic": self.config.topic,
            "include_answer": self.config.include_answer,
        }
        body = self._post(payload, key)
        results = body.get("results")
        if not isinstance(results, list):
            raise ToolError(f"web search got a malformed answer from {self.endpoint}: no `results` list")
        hits = [_clean(r) for r in results if isinstance(r, dict)][:max_results]
        answer = body.get("answer") if isinstance(body.get("answer"), str) else None
        return ToolOutput(content=self._render(query.strip(), hits, answer),
                          data={"results": hits, "answer": answer})

    def _post(self, payload: dict[str, Any], key: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        retrying = Retrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.config.max_attempts),
            wait=wait_exponential(multiplier=self.config.backoff_initial_s, max=self.config.backoff_max_s),
            before_sleep=self._log_retry,
            reraise=True,
        )
        # Errors below are re-raised `from None`: the httpx exceptions carry the request, whose
        # headers hold the key, and nothing of it should travel with the ToolError.
        try:
            with httpx.Client(timeout=self.config.timeout_s) as client:
                response = retrying(self._attempt, client, payload, headers, key)
        except _RetryableHTTPError as exc:
            raise ToolError(f"web search failed after {self.config.max_attempts} attempts: "
                            f"HTTP {exc.status} from {self.endpoint}{exc.detail}") from None
        except httpx.TimeoutException:
            raise ToolError(f"web search timed out after {self.config.timeout_s:g} s "
                            f"({self.config.max_attempts} attempts) at {self.endpoint}") from None
        except httpx.TransportError as exc:
            raise ToolError(f"web search could not reach {self.endpoint} after {self.config.max_attempts} "
                            f"attempts ({type(exc).__name__})") from None
        try:
            body = response.json()
        except ValueError:
            raise ToolError(f"web search got a non-JSON answer from {self.endpoint}") from None
        if not isinstance(body, dict):
            raise ToolError(f"web search got a malformed answer from {self.endpoint}: not a JSON object")
        return body

    def _attempt(self, client: httpx.Client, payload: dict[str, Any], headers: dict[str, str],
                 key: str) -> httpx.Response:
        response = client.post(self.endpoint, json=payload, headers=headers)
        if response.status_code < 400:
            return response
        detail = _error_detail(response, key)
        if response.status_code in RETRY_STATUSES:
            raise _RetryableHTTPError(response.status_code, detail)
        if response.status_code in (401, 403):
            raise ToolError(f"web search was refused (HTTP {response.status_code}): check the API key in "
                            f"{self.config.api_key_env}{detail}")
        raise ToolError(f"web search failed: HTTP {response.status_code} from {self.endpoint}{detail}")

    def _log_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        # Only the status or the exception type: httpx messages are safe, but keep logs minimal.
        what = f"HTTP {exc.status}" if isinstance(exc, _RetryableHTTPError) else type(exc).__name__
        log.warning("web search attempt %d/%d failed (%s); retrying", state.attempt_number,
                    self.config.max_attempts, what)

    def _render(self, query: str, hits: list[dict[str, Any]], answer: str | None) -> str:
        if not hits and not answer:
            return f"No web results for {query!r}."
        parts = [f"Web results for {query!r}:"]
        if answer:
            parts.append(f"Answer (from the search engine): {answer}")
        for i, hit in enumerate(hits, start=1):
            content = hit["content"]
            if len(content) > self.config.max_content_chars:
                content = content[: self.config.max_content_chars].rstrip() + " ..."
            parts.append(f"[{i}] {hit['title'] or '(untitled)'}\nURL: {hit['url']}\n{content}")
        return "\n\n".join(parts)


def _clean(result: dict[str, Any]) -> dict[str, Any]:
    """One Tavily result with the fields we use, tolerating missing or mistyped ones."""
    score, published = result.get("score"), result.get("published_date")
    return {
        "title": str(result.get("title") or ""),
        "url": str(result.get("url") or ""),
        "content": str(result.get("content") or ""),
        "score": float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
        "published_date": published if isinstance(published, str) else None,
    }


def _error_detail(response: httpx.Response, key: str) -> str:
    """A short, key-free summary of an error body (Tavily sends {"detail": {"error": ...}})."""
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
        if isinstance(detail, dict) and "error" in detail:
            detail = detail["error"]
        text = str(detail)
    except ValueError:
        text = response.text
    if key:  # mask before cutting, so no prefix of the key survives the cut
        text = text.replace(key, "***")
    text = " ".join(text.split())[:200]
    return f": {text}" if text else ""
