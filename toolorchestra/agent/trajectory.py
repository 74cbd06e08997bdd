"""What an orchestrator episode records: every turn, its cost, latency and tokens.

A `Trajectory` serialises to JSON and back unchanged (`to_json` / `from_json`), so trajectories
can be stored with evaluation results, replayed for SFT, and scored by the reward later.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from toolorchestra.llm.base import Message, Usage

StopReason = Literal["answer_tool", "final_message", "max_turns", "budget", "policy_error"]


class Turn(BaseModel):
    index: int
    text: str = Field(description="what the orchestrator generated this turn (raw)")
    tool: str | None = Field(None, description="tool called; None when the model answered without a call")
    arguments: dict[str, Any] | None = None
    observation: str | None = None
    ok: bool = True
    error: str | None = Field(
        None, description="malformed_call, unknown_tool, invalid_arguments, tool_error, llm_error, crash, repeated_call"
    )
    cost_usd: float = Field(0.0, description="policy tokens + tool cost of this turn, USD")
    latency_s: float = Field(0.0, description="policy generation + tool wall time of this turn")
    policy_usage: Usage = Field(default_factory=Usage)
    tool_usage: dict[str, Usage] = Field(default_factory=dict)
    tool_cost_usd: float = 0.0
    tool_latency_s: float = 0.0
    started_at: float | None = Field(None, description="Unix time the policy's generation started (traces)")
    tool_started_at: float | None = Field(None, description="Unix time the tool call started (traces)")


def model_calls(turns: list[Turn] | list[dict[str, Any]]) -> dict[str, int]:
    """Calls served per model alias in these turns (`Turn`s, or their JSON dumps as evaluation
    records store them): one per turn whose `tool_usage` names the alias."""
    counts: dict[str, int] = {}
    for turn in turns:
        usage = turn.get("tool_usage") if isinstance(turn, dict) else turn.tool_usage
        for alias in usage or {}:
            counts[alias] = counts.get(alias, 0) + 1
    return counts


def reused_prompt_tokens(earlier: list[Turn]) -> int:
    """Of the next policy turn's prompt, the tokens billed at the cached input price: the previous
    turn's whole prompt, which the next one repeats word for word (the transcript only grows) and a
    prefix cache keeps, as llama.cpp's engine and every serving stack with prefix caching do. A
    stated rule rather than the engine's `cached_prompt_tokens`, which also counts what other
    episodes left in the cache: an episode's cost must not depend on what ran before it."""
    return earlier[-1].policy_usage.prompt_tokens if earlier else 0


class Trajectory(BaseModel):
    task: str
    preference: str | None = None
    policy: str = ""
    turns: list[Turn] = Field(default_factory=list)
    messages: list[Message] = Field(default_factory=list, description="the full chat transcript")
    answer: str | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    budget_usd: float | None = Field(None, description="the cost limit the episode ran under, USD")

    @property
    def cost_usd(self) -> float:
        return sum(t.cost_usd for t in self.turns)

    @property
    def latency_s(self) -> float:
        return sum(t.latency_s for t in self.turns)

    @property
    def tokens(self) -> dict[str, Usage]:
        """Tokens per model: the policy under its name, experts under their catalog aliases."""
        totals: dict[str, Usage] = {}
        for turn in self.turns:
            totals[self.policy] = totals.get(self.policy, Usage()) + turn.policy_usage
            for alias, used in turn.tool_usage.items():
                totals[alias] = totals.get(alias, Usage()) + used
        return totals

    @property
    def tool_calls(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.turns:
            if turn.tool is not None:
                counts[turn.tool] = counts.get(turn.tool, 0) + 1
        return counts

    @property
    def model_calls(self) -> dict[str, int]:
        """Calls each expert model served, by catalog alias: the turns whose tool used its tokens
        (a vote expert's k samples are one call; the policy's own generations are not counted)."""
        return model_calls(self.turns)

    @property
    def format_valid(self) -> bool:
        """Every turn was a well-formed call or a plain final message."""
        return all(t.error != "malformed_call" for t in self.turns) and self.stop_reason != "policy_error"

    def metrics(self) -> dict[str, float]:
        """The per-rollout metrics the reward reads: `calls/<tool>`, `models/<alias>`, `cost`, `latency`."""
        out: dict[str, float] = {f"calls/{name}": float(n) for name, n in self.tool_calls.items()}
        out.update({f"models/{alias}": float(n) for alias, n in self.model_calls.items()})
        out["cost"] = self.cost_usd
        out["latency"] = self.latency_s
        return out

    def summary(self) -> dict[str, Any]:
        """The stable JSON shape `orchestra ask --json` prints."""
        return {
            "task": self.task,
            "preference": self.preference,
            "policy": self.policy,
            "answer": self.answer,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "budget_usd": self.budget_usd,
            "turns": [
                {
                    "index": t.index,
                    "text": t.text,
                    "tool": t.tool,
                    "arguments": t.arguments,
                    "observation": t.observation,
                    "ok": t.ok,
                    "error": t.error,
                    "cost_usd": t.cost_usd,
                    "latency_s": t.latency_s,
                }
                for t in self.turns
            ],
            "tool_calls": self.tool_calls,
            "model_calls": self.model_calls,
            "cost_usd": self.cost_usd,
            "latency_s": self.latency_s,
            "tokens": {k: v.model_dump() for k, v in self.tokens.items()},
            "format_valid": self.format_valid,
        }

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Trajectory:
        return cls.model_validate_json(text)
