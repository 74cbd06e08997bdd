"""The orchestrator loop: reason -> one tool call -> observation, until an answer or max turns.

Phases per turn: generate (the policy, batched across episodes) -> parse (Hermes text or the
server's structured call) -> act (the toolbox; calls of different episodes run concurrently in a
thread pool since they are mostly I/O-bound) -> record. Nothing the model writes can crash the
loop: a malformed call, an unknown tool, bad arguments, a failing tool or expert endpoint each
become an error observation; only the policy's own endpoint failing ends an episode, recorded as
`policy_error`.

Departure from the paper's released code: the preference text is appended to the task in the user
turn (as the paper describes), and the episode also ends on a plain final message, not only on
the `answer` tool, so prompted general models work as orchestrators too.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.agent.trajectory import Trajectory, Turn
from toolorchestra.llm.base import LLM, Completion, LLMError, Message
from toolorchestra.llm.hermes import MalformedToolCall, ParsedCall, parse_arguments, parse_tool_call
from toolorchestra.tools.catalog import Price
from toolorchestra.tools.experts import EpisodeContext
from toolorchestra.tools.toolbox import CallResult, Toolbox

SYSTEM_PROMPT = (
    "You are an orchestrator. Solve the user's task by calling the tools provided, one call per "
    "turn, and read each result before deciding the next step. Prefer cheap tools when they "
    "suffice and follow the user's preferences about tools and spending. When you know the final "
    "answer, reply with the answer alone, without a tool call."
)
FORMAT_HINT = 'Write a call as <tool_call>\n{"name": "<tool>", "arguments": {...}}\n</tool_call>.'


def user_message(task: str, preference: str | None) -> str:
    return f"{task}\n\nUser preference: {preference}" if preference else task


@dataclass
class Episode:
    """One orchestrator episode in progress, with its own tools (e.g. its own live database)."""

    trajectory: Trajectory
    context: EpisodeContext
    toolbox: Toolbox
    specs: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False

    @property
    def messages(self) -> list[Message]:
        return self.trajectory.messages


class Orchestrator:
    def __init__(
        self,
        policy: LLM,
        toolbox: Toolbox,
        *,
        policy_price: Price | None = None,
        max_turns: int = 8,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        system_prompt: str = SYSTEM_PROMPT,
        max_workers: int = 8,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.policy, self.toolbox = policy, toolbox
        self.policy_price = policy_price or Price()
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.temperature, self.seed = temperature, seed
        self.system_prompt = system_prompt
        self.max_workers = max_workers

    def start(self, task: str, preference: str | None = None, *, toolbox: Toolbox | None = None,
              messages: list[Message] | None = None) -> Episode:
        """A new episode. `toolbox` gives it its own tools (default: the orchestrator's);
        `messages` replaces the default system + user prompt (e.g. a training instance's)."""
        trajectory = Trajectory(task=task, preference=preference, policy=self.policy.model)
        if messages is not None:
            trajectory.messages.extend(dict(m) for m in messages)
        else:
            trajectory.messages.extend([
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": user_message(task, preference)},
            ])
        toolbox = toolbox or self.toolbox
        return Episode(trajectory=trajectory, context=EpisodeContext(task=task), toolbox=toolbox,
                       specs=toolbox.specs())

    def run(self, task: str, preference: str | None = None) -> Trajectory:
        return self.run_batch([(task, preference)])[0]

    def run_batch(self, tasks: list[tuple[str, str | None]]) -> list[Trajectory]:
        """Run several episodes in lockstep: one batched policy generation per turn."""
        return self.run_episodes([self.start(task, preference) for task, preference in tasks])

    def run_episodes(self, episodes: list[Episode]) -> list[Trajectory]:
        """Advance started episodes in lockstep until each answers or reaches `max_turns`."""
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            for _ in range(self.max_turns):
                active = [e for e in episodes if not e.done]
                if not active:
                    break
                completions = self._generate(active)
                steps = [self._parse(e, c) for e, c in zip(active, completions, strict=True)]
                futures = [
                    pool.submit(e.toolbox.call, call.name, call.arguments, e.context)
                    if isinstance(call, ParsedCall) else None
                    for e, (_, call) in zip(active, steps, strict=True)
                ]
                for episode, (completion, call), future in zip(active, steps, futures, strict=True):
                    result = future.result() if future is not None else None
                    self._record(episode, completion, call, result)
        for episode in episodes:
            if not episode.done:
                episode.trajectory.stop_reason = "max_turns"
        return [e.trajectory for e in episodes]

    # -- phases ------------------------------------------------------------------------------

    def _generate(self, active: list[Episode]) -> list[Completion | LLMError]:
        kwargs: dict[str, Any] = dict(max_tokens=self.max_tokens, temperature=self.temperature, seed=self.seed)
        shared = all(e.specs == active[0].specs for e in active[1:])
        if shared:
            kwargs["tools"] = active[0].specs
        else:
            kwargs["tools_per_row"] = [e.specs for e in active]
        try:
            return list(self.policy.chat_batch([e.messages for e in active], **kwargs))
        except LLMError as exc:
            if len(active) == 1:  # the backend already retried; this episode's policy failed
                return [exc]
            # Retry one by one so a single failing request does not sink the whole batch.
            results: list[Completion | LLMError] = []
            for episode in active:
                try:
                    results.append(self.policy.chat(episode.messages, tools=episode.specs, max_tokens=self.max_tokens,
                                                    temperature=self.temperature, seed=self.seed))
                except LLMError as err:
                    results.append(err)
            return results

    @staticmethod
    def _parse(episode: Episode, completion: Completion | LLMError) -> tuple[Completion | LLMError, ParsedCall | MalformedToolCall | None]:
        if isinstance(completion, LLMError):
            return completion, None
        try:
            if completion.tool_calls:
                first = completion.tool_calls[0]
                return completion, ParsedCall(name=first.name, arguments=parse_arguments(first.arguments))
            return completion, parse_tool_call(completion.text)
        except MalformedToolCall as exc:
            return completion, exc

    def _record(self, episode: Episode, completion: Completion | LLMError,
                call: ParsedCall | MalformedToolCall | None, result: CallResult | None) -> None:
        trajectory = episode.trajectory
        index = len(trajectory.turns)
        if isinstance(completion, LLMError):
            trajectory.stop_reason, trajectory.error = "policy_error", str(completion)
            episode.done = True
            return
        policy_cost = self.policy_price.tokens_cost(completion.usage)
        turn = Turn(index=index, text=completion.text, policy_usage=completion.usage,
                    cost_usd=policy_cost, latency_s=completion.latency_s)
        trajectory.turns.append(turn)
        structured = completion.tool_calls[0] if completion.tool_calls else None
        if structured is not None:
            trajectory.messages.append({
                "role": "assistant",
                "content": completion.text,
                "tool_calls": [{"id": structured.id, "type": "function",
                                "function": {"name": structured.name, "arguments": structured.arguments}}],
            })
        else:
            trajectory.messages.append({"role": "assistant", "content": completion.text})

        def observe(text: str) -> None:
            message: Message = {"role": "tool", "content": text}
            if structured is not None and structured.id:
                message["tool_call_id"] = structured.id
            trajectory.messages.append(message)
            turn.observation = text

        if call is None:  # a plain message: the final answer
            trajectory.answer = completion.text.strip()
            trajectory.stop_reason = "final_message"
            episode.done = True
            return
        if isinstance(call, MalformedToolCall):
            turn.ok, turn.error = False, "malformed_call"
            observe(f"Error: malformed tool call: {call}. {FORMAT_HINT}")
            return
        assert result is not None
        turn.tool, turn.arguments = call.name, call.arguments
        turn.ok, turn.error = result.ok, result.error
        turn.tool_usage, turn.tool_cost_usd, turn.tool_latency_s = result.usage, result.cost_usd, result.latency_s
        turn.cost_usd += result.cost_usd
        turn.latency_s += result.latency_s
        observe(result.observation)
        if result.ok:
            episode.context.notes.append(f"[{call.name}] {result.observation}")
        if isinstance(result.data, dict) and result.data.get("final"):
            trajectory.answer = str(result.data.get("answer", "")).strip()
            trajectory.stop_reason = "answer_tool"
            episode.done = True
