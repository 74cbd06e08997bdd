"""The response bodies: usage, the `orchestra` extension field, streamed steps as SSE chunks."""

from __future__ import annotations

import json
from typing import Any

from fastapi.sse import format_sse_event

from toolorchestra.agent.trajectory import Trajectory, Turn
from toolorchestra.llm.base import Usage
from toolorchestra.serving.models import ServedModel

MAX_STEP_CHARS = 2000  # an observation in a streamed step (the full one is in the trajectory)
FINISH = {"answer_tool": "stop", "final_message": "stop", "max_turns": "length", "budget": "length"}


def usage_totals(trajectory: Trajectory) -> Usage:
    total = Usage()
    for used in trajectory.tokens.values():
        total = total + used
    return total


def orchestra_summary(trajectory: Trajectory, served: ServedModel, preference_source: str | None) -> dict[str, Any]:
    summary = trajectory.summary()
    return {"cost_usd": trajectory.cost_usd, "latency_s": trajectory.latency_s,
            "stop_reason": trajectory.stop_reason, "reason": trajectory.error, "budget_usd": trajectory.budget_usd,
            "tokens": summary["tokens"], "tool_calls": summary["tool_calls"], "model_version": served.registered.ref,
            "preference": trajectory.preference, "preference_source": preference_source, "trajectory": summary}


def usage_body(trajectory: Trajectory) -> dict[str, Any]:
    total = usage_totals(trajectory)
    return {"prompt_tokens": total.prompt_tokens, "completion_tokens": total.completion_tokens,
            "total_tokens": total.total_tokens,
            "prompt_tokens_details": {"cached_tokens": total.cached_prompt_tokens}}


def sse(body: dict[str, Any]) -> str:
    return format_sse_event(data_str=json.dumps(body, ensure_ascii=False)).decode()


def step_of(turn: Turn) -> dict[str, Any] | None:
    """A streamed step: a tool call and its observation (None for the plain final message)."""
    if turn.tool is None and turn.error is None:
        return None
    observation = turn.observation or ""
    if len(observation) > MAX_STEP_CHARS:
        observation = observation[:MAX_STEP_CHARS] + " ..."
    return {"index": turn.index, "tool": turn.tool, "arguments": turn.arguments, "observation": observation,
            "ok": turn.ok, "error": turn.error, "cost_usd": turn.cost_usd, "latency_s": turn.latency_s}


def step_text(step: dict[str, Any]) -> str:
    if step["tool"] is None:
        return f"[{step['error']}] {step['observation']}\n"
    arguments = json.dumps(step["arguments"], ensure_ascii=False)
    observed = step["observation"] if step["error"] != "budget" else "(not called: over budget)"
    return f"[call {step['tool']}] {arguments}\n[observation] {observed}\n"
