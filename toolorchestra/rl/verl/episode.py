"""One verl trajectory's state on our side: its toolbox, database, calls, cost and latency.

verl's `ToolAgentLoop` shares tool objects across all trajectories of a worker, so the state of
one trajectory (a live domain database, the expert context, what was called and what it cost)
lives in a `VerlEpisode` that our agent loop puts in a context variable for the duration of its
`run`; the `BaseTool` adapters read it. `finish` turns the finished rollout (verl's token ids and
response mask) into the project's `Trajectory`, scores it with the same scorer as the TRL backend,
and returns the JSON-safe record the reward module reads from `extra_info["orchestra"]`.
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolorchestra.agent.loop import repeated_failure
from toolorchestra.agent.trajectory import Trajectory, Turn, reused_prompt_tokens
from toolorchestra.episodes.environment import EpisodeConfig, EpisodeSetup, RolloutEnvironment, answered, score_rollout
from toolorchestra.episodes.instance import DomainLocator, Instance
from toolorchestra.llm.base import Usage
from toolorchestra.llm.hermes import MalformedToolCall, parse_tool_call
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import CallResult

CURRENT: contextvars.ContextVar[VerlEpisode | None] = contextvars.ContextVar("orchestra_episode", default=None)

_ENVS: dict[tuple[str, tuple[str, ...], str], RolloutEnvironment] = {}
_ENVS_LOCK = threading.Lock()


def environment(catalog: str | None, data_roots: list[str], episode: dict[str, Any] | None = None) -> RolloutEnvironment:
    """The worker's rollout environment (built once per catalog, data roots and settings)."""
    from toolorchestra.core.settings import load_settings
    from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog

    config = EpisodeConfig(**(episode or {}))
    key = (catalog or "", tuple(data_roots), config.model_dump_json())
    with _ENVS_LOCK:
        if key not in _ENVS:
            cat = load_catalog(catalog) if catalog else load_embedded_catalog()
            _ENVS[key] = RolloutEnvironment(cat, load_settings(), DomainLocator([Path(r) for r in data_roots]), config)
        return _ENVS[key]


@dataclass
class VerlEpisode:
    env: RolloutEnvironment
    instance: Instance
    setup: EpisodeSetup
    context: EpisodeContext
    calls: list[tuple[str, dict[str, Any], CallResult]] = field(default_factory=list)
    answer: str | None = None
    done: bool = False

    @classmethod
    def start(cls, env: RolloutEnvironment, instance: Instance) -> VerlEpisode:
        return cls(env=env, instance=instance, setup=env.setup(instance), context=EpisodeContext(task=instance.question))

    @property
    def tool_names(self) -> list[str]:
        return [spec["function"]["name"] for spec in self.setup.specs]

    def call(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """Run one tool call on this episode's toolbox (never raises for the model's mistakes); a
        repeat of the call that just failed is answered unrun, as in the agent loop."""
        last = None
        if self.calls:
            last_name, last_arguments, last_result = self.calls[-1]
            last = Turn(index=len(self.calls) - 1, text="", tool=last_name, arguments=last_arguments,
                        ok=last_result.ok, error=last_result.error)
        result = (repeated_failure(last, name, arguments, self.setup.toolbox)
                  or self.setup.toolbox.call(name, arguments, self.context))
        self.calls.append((name, arguments, result))
        if result.ok:
            self.context.notes.append(f"[{name}] {result.observation}")
        if isinstance(result.data, dict) and result.data.get("final"):
            self.answer, self.done = str(result.data.get("answer", "")).strip(), True
        return result

    def running_totals(self) -> dict[str, float]:
        return {"tool_cost": sum(r.cost_usd for _, _, r in self.calls),
                "tool_latency": sum(r.latency_s for _, _, r in self.calls), "tool_calls": float(len(self.calls))}

    def trajectory(self, segments: list[tuple[str, int, int]], generate_s: float) -> Trajectory:
        """Our trajectory from the assistant segments (text, context tokens, generated tokens)
        and the recorded calls, which were executed in the order the segments asked for them."""
        price = self.env.policy_price(self.instance)
        total_generated = sum(n for _, _, n in segments) or 1
        pref = self.instance.preference
        trajectory = Trajectory(task=self.instance.question, preference=pref.instruction if pref else None,
                                policy="verl", messages=[dict(m) for m in self.instance.prompt])
        calls = iter(self.calls)
        for index, (text, context_tokens, generated) in enumerate(segments):
            usage = Usage(prompt_tokens=context_tokens, completion_tokens=generated)
            cost = price.tokens_cost(usage, reused_prompt_tokens(trajectory.turns))
            turn = Turn(index=index, text=text, policy_usage=usage, cost_usd=cost,
                        latency_s=generate_s * generated / total_generated)
            trajectory.messages.append({"role": "assistant", "content": text})
            try:
                parsed = parse_tool_call(text)
            except MalformedToolCall as exc:
                turn.ok, turn.error = False, "malformed_call"
                turn.observation = f"Error: malformed tool call: {exc}"
                trajectory.turns.append(turn)
                continue
            if parsed is None:
                trajectory.turns.append(turn)
                trajectory.answer, trajectory.stop_reason = text.strip(), "final_message"
                break
            name, arguments, result = next(calls, (parsed.name, parsed.arguments, None))
            turn.tool, turn.arguments = name, arguments
            if result is None:  # verl did not execute it (e.g. the turn budget ran out)
                trajectory.turns.append(turn)
                continue
            turn.ok, turn.error, turn.observation = result.ok, result.error, result.observation
            turn.tool_usage, turn.tool_cost_usd, turn.tool_latency_s = result.usage, result.cost_usd, result.latency_s
            turn.cost_usd += result.cost_usd
            turn.latency_s += result.latency_s
            trajectory.messages.append({"role": "tool", "content": result.observation})
            trajectory.turns.append(turn)
            if isinstance(result.data, dict) and result.data.get("final"):
                trajectory.answer, trajectory.stop_reason = self.answer, "answer_tool"
                break
        if trajectory.stop_reason is None:
            trajectory.stop_reason = "max_turns"
        return trajectory

    def finish(self, prompt_len: int, response_ids: list[int], response_mask: list[int], tokenizer: Any,
               *, generate_s: float, group: str, session: int | None, group_size: int) -> dict[str, Any]:
        """The record the reward reads (JSON-safe)."""
        segments = assistant_segments(prompt_len, response_ids, response_mask, tokenizer)
        trajectory = self.trajectory(segments, generate_s)
        correct, details = score_rollout(self.instance, trajectory, self.setup.env)
        return {
            "group": str(group), "session": session, "group_size": int(group_size),
            "instance_id": self.instance.id, "correct": bool(correct), "format_valid": trajectory.format_valid,
            "answered": answered(trajectory), "valid": trajectory.format_valid and answered(trajectory),
            "metrics": trajectory.metrics(), "preference": self.env.preference(self.instance),
            "turns": len(trajectory.turns), "details": {k: v for k, v in details.items() if k in ("db", "action", "communicate")},
        }


def assistant_segments(prompt_len: int, response_ids: list[int], response_mask: list[int],
                       tokenizer: Any) -> list[tuple[str, int, int]]:
    """(text, context tokens before it, tokens generated) for each run of mask-1 tokens."""
    segments = []
    start = None
    for i, bit in enumerate([*response_mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            ids = response_ids[start:i]
            segments.append((tokenizer.decode(ids, skip_special_tokens=True).strip(), prompt_len + start, len(ids)))
            start = None
    return segments
