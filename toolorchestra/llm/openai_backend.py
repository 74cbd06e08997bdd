"""Any OpenAI-compatible chat endpoint (vLLM `serve`, llama.cpp's server, hosted APIs).

Uses the official `openai` client with its own retries switched off and tenacity around each call:
exponential backoff on 429, 5xx, timeouts and connection errors; other 4xx fail at once. A call
takes at most about `max_total_s` (default 60 s) however the server misbehaves: each attempt's
timeout (`timeout_s`, default 30 s) is cut to the time left, and no attempt starts after it. The API
key is read from the environment variable the config names, never stored or logged.

`chat_batch` sends its chats as concurrent requests (up to `max_concurrent`): a serving engine
batches requests that overlap, and one after another a lockstep batch of N episodes (the serving
app's batcher, an evaluation) would wait N round trips per turn.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

from toolorchestra.core.services import redact_url
from toolorchestra.llm.base import LLM, Completion, LLMError, Message, ToolCallRequest, Usage, tools_by_row

TOOL_RESPONSE = "<tool_response>\n{}\n</tool_response>"


def _transient(exc: BaseException) -> bool:
    import openai

    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError)):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def to_wire_messages(messages: list[Message]) -> list[Message]:
    """Adapt our transcript for an OpenAI server.

    A tool result without a `tool_call_id` answers a call the model wrote as text (the server did
    not parse it), so it is sent as a user turn with a `<tool_response>` block, as Hermes-style
    templates render it; structured calls keep their ids.
    """
    wire = []
    for message in messages:
        if message.get("role") == "tool" and not message.get("tool_call_id"):
            wire.append({"role": "user", "content": TOOL_RESPONSE.format(message.get("content", ""))})
        else:
            wire.append(message)
    return wire


class OpenAILLM(LLM):
    concurrent_episodes = True  # the evaluation runs each episode in its own thread: requests overlap

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_total_s: float = 60.0,
        max_concurrent: int = 16,
    ) -> None:
        import openai

        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.model = model
        self.max_concurrent = max_concurrent
        self.base_url = base_url
        self._api_key = api_key
        # Servers without auth (local vLLM / llama.cpp) still need a non-empty key for the client.
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
        )
        self.timeout_s, self.max_total_s = timeout_s, max_total_s
        self._retry = dict(
            # A hung server costs at most ~max_total_s (not max_attempts x timeout_s): no attempt
            # starts after it, and each one's timeout is cut to what is left of it.
            stop=stop_after_attempt(max_attempts) | stop_after_delay(max_total_s),
            wait=wait_exponential(multiplier=backoff_s, max=max_backoff_s),
            retry=retry_if_exception(_transient),
            reraise=False,
        )

    def _redact(self, text: str) -> str:
        """Servers may echo the key in error bodies, and a base_url may embed a password
        (`http://user:pw@host`); never let either reach a log or observation."""
        if self._api_key and len(self._api_key) >= 4:
            text = text.replace(self._api_key, "***")
        if self.base_url:
            text = text.replace(self.base_url, redact_url(self.base_url))
            password = urlsplit(self.base_url).password
            if password and len(password) >= 4:
                text = text.replace(password, "***")
        return text

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0,
                   seed=None, stop=None) -> list[Completion]:
        """The chats as concurrent requests, replies in order (see the module docstring); when a
        request fails, the first failure is raised once every request has returned."""
        rows = tools_by_row(batch, tools, tools_per_row)
        if len(batch) <= 1:
            return [self.chat(m, tools=specs, max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop)
                    for m, specs in zip(batch, rows, strict=True)]
        with ThreadPoolExecutor(max_workers=min(len(batch), self.max_concurrent),
                                thread_name_prefix="orchestra-openai") as pool:
            futures = [pool.submit(self.chat, m, tools=specs, max_tokens=max_tokens, temperature=temperature,
                                   seed=None if seed is None else seed + i, stop=stop)
                       for i, (m, specs) in enumerate(zip(batch, rows, strict=True))]
        failed = next((f.exception() for f in futures if f.exception() is not None), None)
        if failed is not None:
            raise failed
        return [f.result() for f in futures]

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None) -> Completion:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": to_wire_messages(messages),
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        if tools:
            request["tools"] = tools
        if seed is not None:
            request["seed"] = seed
        if stop:
            request["stop"] = list(stop)
        started = time.perf_counter()
        try:
            for attempt in Retrying(**self._retry):
                with attempt:
                    left = self.max_total_s - (time.perf_counter() - started)
                    timeout = min(self.timeout_s, max(left, 0.1))
                    response = self._client.chat.completions.create(**request, timeout=timeout)
        except RetryError as exc:
            last = exc.last_attempt.exception()
            raise LLMError(
                self._redact(
                    f"{self.model} at {self.base_url or 'the default endpoint'} failed after "
                    f"{exc.last_attempt.attempt_number} attempts: {type(last).__name__}: {last}"
                )
            ) from None
        except Exception as exc:  # non-transient API errors (400, 401, 404, ...)
            where = self.base_url or "the default endpoint"
            raise LLMError(self._redact(f"{self.model} at {where}: {type(exc).__name__}: {exc}")) from None
        latency = time.perf_counter() - started
        if not response.choices:
            raise LLMError(f"{self.model} returned no choices")
        choice = response.choices[0]
        calls = [
            ToolCallRequest(name=c.function.name, arguments=c.function.arguments or "{}", id=c.id)
            for c in (choice.message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        usage = response.usage
        return Completion(
            text=(choice.message.content or "").strip(),
            tool_calls=calls,
            usage=Usage(
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                # OpenAI's and vLLM's (--enable-prompt-tokens-details) prefix-cache hits
                cached_prompt_tokens=getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0,
            ),
            latency_s=latency,
            model=response.model or self.model,
            finish_reason=choice.finish_reason,
        )
