"""The orchestrator loop: reason -> one tool call -> observation, until an answer or max turns.

Phases per turn: generate (the policy, batched across episodes) -> parse (Hermes text or the
server's structured call) -> act (the toolbox; calls of different episodes run concurrently in a
thread pool since they are mostly I/O-bound) -> record. Nothing the model writes can crash the
loop: a malformed call, an unknown tool, bad arguments, a failing tool or expert endpoint each
become an error observation; only the policy's own endpoint failing ends an episode, recorded as
`policy_error`. A plain reply that repeats the failed call just before it (its error text, or
a line of it) is no answer (`echoed_failure`): the episode ends with `answer=None` and `error`
saying so, since a user reading "SyntaxError: invalid syntax" as the answer is misled; any other
reply right after a failed call is kept as the answer, with `error` saying no result supports it.

Limits per episode: `max_turns`, and `budget_usd`, a cost limit the loop enforces *before* each
call: when the next policy turn (its prompt counted by the backend - exactly for a local model,
estimated for a remote one - plus `max_tokens` of output)
or the next tool call (`Toolbox.cost_bound`) would take the episode's cost past the budget, the
call is not made and the episode ends with `stop_reason="budget"`, the best answer so far (the
last successful observation) and `error` saying why. Observers (`Episode.on_turn`, `on_done`)
see each turn as it is recorded and each episode as it ends (streaming servers, traces).

Departure from the paper's released code: the preference text is appended to the task in the user
turn (as the paper describes), and the episode also ends on a plain final message, not only on
the `answer` tool, so prompted general models work as orchestrators too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from toolorchestra.agent.trajectory import Trajectory, Turn, reused_prompt_tokens
from toolorchestra.llm.base import LLM, Completion, LLMError, Message, Usage
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
    max_turns: int | None = None
    """This episode's turn limit (default: the orchestrator's)."""
    budget_usd: float | None = None
    """This episode's cost limit in USD (None: unlimited)."""
    on_turn: Callable[[Turn], None] | None = None
    on_done: Callable[[Trajectory], None] | None = None
    _notified: bool = field(default=False, repr=False)

    @property
    def messages(self) -> list[Message]:
        return self.trajectory.messages

    def finish(self, reason: str, error: str | None = None) -> None:
        self.trajectory.stop_reason = reason  # type: ignore[assignment]
        if error is not None:
            self.trajectory.error = error
        self.done = True

    def notify_done(self) -> None:
        """Tell the `on_done` observer once, after the episode's last turn was reported."""
        if self.done and not self._notified:
            self._notified = True
            if self.on_done is not None:
                self.on_done(self.trajectory)

    def over_budget(self, next_cost: float) -> bool:
        return self.budget_usd is not None and self.trajectory.cost_usd + next_cost > self.budget_usd

    def stop_for_budget(self, what: str, next_cost: float) -> None:
        """End within the budget with the best answer so far: the last successful observation."""
        left = (self.budget_usd or 0.0) - self.trajectory.cost_usd
        observed = [t.observation for t in self.trajectory.turns if t.ok and t.observation]
        self.trajectory.answer = observed[-1].strip() if observed else None
        self.finish("budget", f"budget: the next {what} could cost ${next_cost:.6f}, "
                              f"${max(left, 0.0):.6f} of ${self.budget_usd:.6f} left")


def echoed_failure(before: Turn | None, reply: str) -> bool:
    """Whether `reply` repeats the failed call `before` it: its error observation or one of its
    lines. A policy taught to answer with a program's last printed line answers a program's
    SyntaxError with that line; shown as the answer it reads as one."""
    if before is None or before.ok or not before.observation or not reply:
        return False
    lines = {line.strip() for line in before.observation.strip().splitlines() if line.strip()}
    return reply == before.observation.strip() or reply in lines


RERUN_NEVER_HELPS = ("unknown_tool", "invalid_arguments")
"""Failures the toolbox returns without running the tool: the same call gets the same answer."""


def repeated_failure(before: Turn | None, name: str, arguments: dict[str, Any], toolbox: Toolbox) -> CallResult | None:
    """The result for a call that repeats, with the same arguments, the call that failed on the
    last turn (`before`), when running it again cannot change the outcome (the toolbox rejected it unrun, or
    the tool is `deterministic`); None otherwise, and the call runs. The 2026-12-07 demo's policy
    sent the same failing program or lookup three times in a row; each run cost a sandbox start or
    a tool call and told it nothing new."""
    if before is None or before.ok or before.tool != name or before.arguments != arguments:
        return None
    tool = toolbox.tools.get(name)
    rerun_fails = before.error in RERUN_NEVER_HELPS or (
        before.error == "tool_error" and tool is not None and tool.deterministic)
    if not rerun_fails:
        return None  # a model's sample or a remote call may come out differently
    return CallResult(observation=f"Error: not run: this exact {name} call failed on the last turn and would "
                                  "fail again. Change its arguments, call another tool, or answer.",
                      ok=False, error="repeated_call")


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
        budget_usd: float | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.policy, self.toolbox = policy, toolbox
        self.policy_price = policy_price or Price()
        self.max_turns, self.max_tokens = max_turns, max_tokens
        self.temperature, self.seed = temperature, seed
        self.system_prompt = system_prompt
        self.max_workers = max_workers
        self.budget_usd = budget_usd

    def start(self, task: str, preference: str | None = None, *, toolbox: Toolbox | None = None,
              messages: list[Message] | None = None, max_turns: int | None = None,
              budget_usd: float | None = None) -> Episode:
        """A new episode. `toolbox` gives it its own tools (default: the orchestrator's);
        `messages` replaces the default system + user prompt (e.g. a training instance's);
        `max_turns` and `budget_usd` override the orchestrator's limits for this episode."""
        if max_turns is not None and max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if budget_usd is not None and budget_usd < 0:
            raise ValueError("budget_usd must not be negative")
        budget = budget_usd if budget_usd is not None else self.budget_usd
        trajectory = Trajectory(task=task, preference=preference, policy=self.policy.model, budget_usd=budget)
        if messages is not None:
            trajectory.messages.extend(dict(m) for m in messages)
        else:
            trajectory.messages.extend([
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": user_message(task, preference)},
            ])
        toolbox = toolbox or self.toolbox
        return Episode(trajectory=trajectory, context=EpisodeContext(task=task), toolbox=toolbox,
                       specs=toolbox.specs(), max_turns=max_turns or self.max_turns, budget_usd=budget)

    def run(self, task: str, preference: str | None = None) -> Trajectory:
        return self.run_batch([(task, preference)])[0]

    def run_batch(self, tasks: list[tuple[str, str | None]]) -> list[Trajectory]:
        """Run several episodes in lockstep: one batched policy generation per turn."""
        return self.run_episodes([self.start(task, preference) for task, preference in tasks])

    def run_episodes(self, episodes: list[Episode]) -> list[Trajectory]:
        """Advance started episodes in lockstep until each answers or reaches a limit."""
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            while True:
                for episode in episodes:
                    if not episode.done and len(episode.trajectory.turns) >= (episode.max_turns or self.max_turns):
                        episode.finish("max_turns")
                active = [e for e in episodes if not e.done and self._policy_affordable(e)]
                for episode in episodes:
                    episode.notify_done()
                if not active:
                    break
                started = time.time()
                completions = self._generate(active)
                steps = [self._parse(e, c) for e, c in zip(active, completions, strict=True)]
                futures = [
                    pool.submit(self._act, e, call, completion)
                    if isinstance(call, ParsedCall) else None
                    for e, (completion, call) in zip(active, steps, strict=True)
                ]
                for episode, (completion, call), future in zip(active, steps, futures, strict=True):
                    acted = future.result() if future is not None else None
                    self._record(episode, completion, call, acted, started)
                    episode.notify_done()
        return [e.trajectory for e in episodes]

    def _policy_affordable(self, episode: Episode) -> bool:
        """False (and the episode ends) when the next policy turn could exceed its budget."""
        if episode.budget_usd is None:
            return True
        prompt = self.policy.count_prompt_tokens(episode.messages, episode.specs or None)
        bound = self.policy_price.tokens_cost(Usage(prompt_tokens=prompt, completion_tokens=self.max_tokens))
        if episode.over_budget(bound):
            episode.stop_for_budget("policy turn", bound)
            return False
        return True

    def _act(self, episode: Episode, call: ParsedCall, completion: Completion | LLMError) -> tuple[float, CallResult] | None:
        """Run the call (returns its start time and result), or None when it could exceed the budget;
        a repeat of the call that just failed is answered without running it (`repeated_failure`)."""
        turns = episode.trajectory.turns
        refused = repeated_failure(turns[-1] if turns else None, call.name, call.arguments, episode.toolbox)
        if refused is not None:
            return time.time(), refused
        if episode.budget_usd is not None and isinstance(completion, Completion):
            bound = self.policy_price.tokens_cost(completion.usage, reused_prompt_tokens(turns))  # spent
            bound += episode.toolbox.cost_bound(call.name, call.arguments, episode.context)
            if episode.over_budget(bound):
                return None
        return time.time(), episode.toolbox.call(call.name, call.arguments, episode.context)

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
                call: ParsedCall | MalformedToolCall | None, acted: tuple[float, CallResult] | None,
                started: float) -> None:
        trajectory = episode.trajectory
        index = len(trajectory.turns)
        if isinstance(completion, LLMError):
            episode.finish("policy_error", str(completion))
            return
        policy_cost = self.policy_price.tokens_cost(completion.usage, reused_prompt_tokens(trajectory.turns))
        turn = Turn(index=index, text=completion.text, policy_usage=completion.usage,
                    cost_usd=policy_cost, latency_s=completion.latency_s, started_at=started)
        self._apply(episode, turn, completion, call, acted)
        if episode.on_turn is not None:
            episode.on_turn(turn)

    def _apply(self, episode: Episode, turn: Turn, completion: Completion,
               call: ParsedCall | MalformedToolCall | None, acted: tuple[float, CallResult] | None) -> None:
        trajectory = episode.trajectory
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
            reply = completion.text.strip()
            before = trajectory.turns[-2] if len(trajectory.turns) > 1 else None
            if echoed_failure(before, reply):
                # a tool's error passed off as the answer: no answer, and the error says why
                trajectory.answer = None
                trajectory.error = f"the reply repeats the failed {before.tool or 'tool'} call's error instead of an answer"
            else:
                trajectory.answer = reply
                if before is not None and not before.ok:  # kept, but flagged: no result supports it
                    trajectory.error = f"the answer follows a failed {before.tool or 'tool'} call; no tool result supports it"
            trajectory.stop_reason = "final_message"
            episode.done = True
            return
        if isinstance(call, MalformedToolCall):
            turn.ok, turn.error = False, "malformed_call"
            observe(f"Error: malformed tool call: {call}. {FORMAT_HINT}")
            return
        turn.tool, turn.arguments = call.name, call.arguments
        if acted is None:  # the call could exceed the budget: not made
            turn.ok, turn.error = False, "budget"
            episode.stop_for_budget(f"{call.name} call", episode.toolbox.cost_bound(call.name, call.arguments,
                                                                                   episode.context))
            return
        turn.tool_started_at, result = acted
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
