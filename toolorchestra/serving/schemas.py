"""The request and response bodies of `POST /v1/chat/completions` (OpenAI's shape) and the
`orchestra` extension field.

Request: OpenAI's `model`, `messages` (the last user message is the task; earlier turns are
context, see `task_text`), `stream`, `max_tokens` (per policy turn), `temperature`, `user`; and an
optional `orchestra` object (the OpenAI client sends it with `extra_body={"orchestra": {...}}`):

| key | meaning |
| --- | --- |
| `preference` | a preference instruction, appended to the task as in training |
| `preference_vector` | `{key: weight}` with the reward's keys (`cost`, `latency`, `calls/<tool>`, `models/<alias>`, ...); rendered as an instruction (`preference.vector_instruction`) |
| `max_turns` | the episode's turn limit |
| `budget_usd` | the episode's cost limit in USD, enforced by the agent loop before each call |
| `trace` | log this request as an MLflow trace (default: the server's sampling rate) |

Response: a `chat.completion` whose assistant message is the final answer; `usage` sums the
policy's and every expert's tokens; `orchestra` holds `cost_usd`, `stop_reason`, `budget_usd`,
`tokens` per model, `model_version` and the `trajectory` (`Trajectory.summary()`). Streaming sends
`chat.completion.chunk` events: one per step (content like `[call code_interpreter] {...}` and
`[observation] ...`, with the step in `orchestra.step`), then the answer, then a final chunk with
`finish_reason`, `usage` and the `orchestra` summary, then `data: [DONE]`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_CONTENT_CHARS = 32_000


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # OpenAI content parts: keep the text ones
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class OrchestraOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preference: str | None = Field(None, max_length=2000)
    preference_vector: dict[str, float] | None = None
    max_turns: int | None = Field(None, ge=1)
    budget_usd: float | None = Field(None, ge=0)
    trace: bool | None = None

    @field_validator("preference_vector")
    @classmethod
    def _few_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and len(value) > 32:
            raise ValueError("at most 32 keys")
        return value


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send fields the orchestrator does not use

    model: str = Field("", max_length=200)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(None, ge=1, le=4096)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    orchestra: OrchestraOptions = Field(default_factory=OrchestraOptions)

    def task_text(self) -> str:
        """The task: the last user message, preceded by earlier turns as context when there are any."""
        users = [i for i, m in enumerate(self.messages) if m.role == "user"]
        if not users:
            raise ValueError("messages need at least one user message")
        last = users[-1]
        task = self.messages[last].text().strip()
        if not task:
            raise ValueError("the last user message is empty")
        earlier = [f"{m.role}: {m.text().strip()}" for m in self.messages[:last]
                   if m.role in ("user", "assistant") and m.text().strip()]
        if earlier:
            task = "Conversation so far:\n" + "\n".join(earlier) + f"\n\nTask:\n{task}"
        if len(task) > MAX_CONTENT_CHARS:
            raise ValueError(f"the task is longer than {MAX_CONTENT_CHARS} characters")
        return task

    def system_preference(self) -> str | None:
        """System/developer messages are user instructions here (the policy keeps its trained prompt)."""
        text = " ".join(m.text().strip() for m in self.messages if m.role in ("system", "developer") and m.text().strip())
        return text or None
