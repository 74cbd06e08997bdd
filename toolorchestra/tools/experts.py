"""LLMs as tools: the paper's `search`, `enhance_reasoning` and `answer`, a plain `ask`, and two
experts that answer by other means: `program` and `vote`.

A tool routing to several models takes a `model` argument naming one by its catalog alias (the
paper's form); a tool with exactly one model has no `model` argument (nothing for a small policy
to get wrong) and its parameters are just an optional `question`. The expert sees the task and
what the episode has gathered so far (an `EpisodeContext` the agent loop keeps), so the
orchestrator can delegate with a short call, as in the paper. The tool reports the expert's
tokens under its alias; the toolbox prices them.

Roles (what the expert does with the task):

- `answer`: the expert replies with the final answer; the task ends with it;
- `program`: the expert writes a short Python program, the code interpreter runs it, and the last
  line it printed is the final answer (the task ends); a program that fails or prints nothing
  ends nothing: the observation says what happened. The run is reported as an inner call of the
  code interpreter, so it is billed at that tool's price, like the policy's own runs;
- `vote`: self-consistency: `samples` answers sampled at `temperature` (one call each, seeded from
  the prompt, so repeatable), a majority vote over their final answers (the last number of a
  reply when it has one, else its normalised text; ties: the earliest); the task ends with the
  winner (its number, for a numeric one). Its usage is the sum of the real samples, so it costs ~k times an
  `answer` call;
- `reason` (`enhance_reasoning`): the expert writes Python that the code interpreter runs; the
  code and its output come back as an observation;
- `search`: the expert writes a query for the retrieval tool; `ask`: a plain question.

An expert that abstains (an empty reply, or "I don't know"-like) does not end the task, for
`answer` and `vote` alike: the observation says so and the orchestrator may ask another expert
(the `cascade` baseline relies on this). The paper's answer tool always ends the task.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.llm.base import LLM, Usage
from toolorchestra.tools.base import Tool, ToolError, ToolOutput

_CODE = re.compile(r"```(?:python|py)?\s*\n(.*?)(?:```|$)", re.S)
MAX_CONTEXT_CHARS = 6000


class EpisodeContext(BaseModel):
    """What an expert may read: the task and the observations gathered so far."""

    task: str
    notes: list[str] = Field(default_factory=list)

    def render(self, max_chars: int = MAX_CONTEXT_CHARS) -> str:
        gathered = "\n\n".join(self.notes)
        if len(gathered) > max_chars:  # keep the most recent evidence
            gathered = "..." + gathered[-max_chars:]
        return f"Task:\n{self.task}\n\nInformation gathered so far:\n{gathered or '(nothing yet)'}"


_PROMPTS = {
    "answer": "Give the final answer to the task. Reply with the answer only, as short as possible.",
    "reason": (
        "Write a short Python 3 program that computes what the task needs and prints the result. "
        "Reply with one ```python code block."
    ),
    "search": "Write one short search query (a few keywords) that would find what the task needs. Reply with the query only.",
    "ask": "Answer the question concisely.",
    "program": (
        "You write Python 3 programs. Reply with one ```python code block that prints the answer, for example:\n"
        "```python\nprint(2 + 2)\n```"
    ),
}
# Said again at the end of the user turn: SmolLM2-135M follows the last instruction it reads (with
# the request only in the system turn it wrote code for 2 of 11 probed questions, with it here 4 of 4).
_ASKS = {"program": "Write a Python program that prints the answer to the task."}
_PROMPTS["vote"] = _PROMPTS["answer"]
# A program reply ends at its code block's closing fence: SmolLM2 goes on explaining the program
# (a program call's reply was 122 tokens on average, half at the 160-token cap, in the 2026-12-01
# evaluation) and nothing after the fence is read. "\n```\n" does not match an opening fence
# ("```python\n"); a reply that ends at the fence stops at end of turn anyway.
_STOPS = {"program": ["\n```\n"]}
FINAL_ROLES = frozenset({"answer", "program", "vote"})
"""Roles whose successful call ends the task."""

# A whole reply like "I don't know", "unknown" or "I cannot answer" is an abstention, not an answer.
_ABSTAIN = re.compile(
    r"(i do not know|i don'?t know|i'?m not sure|i am not sure|not sure|unknown|no answer|n/a"
    r"|(i )?(cannot|can'?t|could not|am unable to) (answer|determine|tell|say|know)"
    r"|(i'?m |i am )?sorry)\b",
    re.I)


def abstains(text: str) -> bool:
    """Whether a reply gives no answer: empty, or opening with an "I don't know"-like phrase.

    >>> [abstains(t) for t in ("", "I don't know.", "Unknown", "42", "Canberra", "Sorry, I cannot answer")]
    [True, True, True, False, False, True]
    """
    return bool(_ABSTAIN.match(text.strip().strip("*_`\"' "))) or not text.strip()


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The last number in `text` in its plain form ("17 * 23 = 391" -> "391"), None without one.

    >>> [final_number(t) for t in ("17 * 23 = 391.", "1,000 apples", "3.50", "Lima")]
    ['391', '1000', '3.5', None]
    """
    found = _NUMBER.findall(text)
    if not found:
        return None
    value = float(found[-1].replace(",", ""))
    if not (abs(value) < 1e15):
        return None
    return str(int(value)) if value.is_integer() else repr(value)


def normalise_answer(text: str) -> str:
    """An answer as votes compare it (self-consistency votes on the final answer, not the
    wording): the last number when there is one ("12 + 30 = 42" -> "42"), else the text with case,
    spacing, surrounding punctuation and "the answer is" ignored.

    >>> [normalise_answer(t) for t in ("The answer is 42.", " 42.0 ", "12 + 30 = 42", "Canberra!", "1,000")]
    ['42', '42', '42', 'canberra', '1000']
    """
    number = final_number(text)
    if number is not None:
        return number
    out = " ".join(text.strip().casefold().split())
    return re.sub(r"^(the )?(final )?answer( is)?:?\s*", "", out).strip(" .!?:;\"'`*")


def extract_code(text: str) -> str | None:
    match = _CODE.search(text)
    return match.group(1).strip() if match else None


class ExpertTool(Tool):
    """An LLM-backed tool. `llms` maps each allowed alias to its backend; with one alias the tool
    takes no `model` argument and always asks that one."""

    def __init__(
        self,
        name: str,
        description: str,
        role: str,
        llms: Mapping[str, LLM],
        *,
        max_tokens: int = 256,
        run_code: Tool | None = None,
        retrieval: Tool | None = None,
        parameters: dict[str, Any] | None = None,
        samples: int = 5,
        temperature: float = 0.7,
    ) -> None:
        if role not in _PROMPTS:
            raise ValueError(f"unknown expert role {role!r}; known: {sorted(_PROMPTS)}")
        if not llms:
            raise ValueError(f"{name}: an expert tool needs at least one model")
        if role in ("reason", "program") and run_code is None:
            raise ValueError(f"{name}: a {role} expert needs a code interpreter")
        if role == "search" and retrieval is None:
            raise ValueError(f"{name}: a search expert needs a retrieval tool")
        if role == "vote" and (samples < 1 or (samples > 1 and temperature <= 0)):
            raise ValueError(f"{name}: a vote expert needs samples >= 1 and, for several, a temperature > 0 "
                             f"(identical greedy samples make the vote pointless); got {samples}, {temperature}")
        self.name, self.description, self.role = name, description, role
        self.llms, self.max_tokens = llms, max_tokens
        self.run_code, self.retrieval = run_code, retrieval
        self.samples = samples if role == "vote" else 1
        self.temperature = temperature
        question = {"type": "string", "description": "what to ask; defaults to the task"}
        if parameters is not None:
            self.parameters = parameters
        elif len(llms) == 1:  # as short as it can be: a small policy reads it every turn
            self.parameters = {"type": "object", "properties": {"question": {"type": "string"}},
                               "additionalProperties": False}
        else:
            self.parameters = {
                "type": "object",
                "properties": {
                    "model": {"type": "string", "enum": sorted(llms), "description": "which expert to ask"},
                    "question": question,
                },
                "required": ["model"],
                "additionalProperties": False,
            }

    @property
    def fixed_alias(self) -> str | None:
        """The one model a single-model tool always asks (None: the call names it)."""
        return next(iter(self.llms)) if len(self.llms) == 1 else None

    def alias_for(self, arguments: dict[str, Any]) -> str:
        """The alias a call asks: its `model` argument, else the tool's only model."""
        alias = arguments.get("model") or self.fixed_alias
        if alias is None:
            raise ToolError(f"name a `model`: one of {sorted(self.llms)}")
        if alias not in self.llms:
            raise ToolError(f"unknown model {alias!r}; choose one of {sorted(self.llms)}")
        return str(alias)

    def inner_tools(self) -> list[str]:
        """Names of the tools a call runs inside (reported back in `ToolOutput.inner_calls`)."""
        return [tool.name for tool in (self.run_code, self.retrieval) if tool is not None]

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return self.run_in_context(arguments, None)

    def run_in_context(self, arguments: dict[str, Any], context: EpisodeContext | None) -> ToolOutput:
        alias = self.alias_for(arguments)
        llm = self.llms[alias]
        question = arguments.get("question")
        if context is None:
            if not question:
                raise ToolError("`question` is required when no task context is available")
            context = EpisodeContext(task=question)
        prompt = context.render()
        if question and question != context.task:
            prompt += f"\n\nQuestion from the orchestrator:\n{question}"
        if self.role in _ASKS:
            prompt += f"\n\n{_ASKS[self.role]}"
        messages = [{"role": "system", "content": _PROMPTS[self.role]}, {"role": "user", "content": prompt}]
        if self.role == "vote":
            return self._vote(llm, alias, messages)
        # LLMError -> error observation upstream
        reply = llm.chat(messages, max_tokens=self.max_tokens, stop=_STOPS.get(self.role))
        usage = {alias: reply.usage}
        return getattr(self, f"_finish_{self.role}")(reply.text, usage)

    def _finish_answer(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        answer = text.strip()
        if abstains(answer):
            return ToolOutput(content=f"The expert gave no answer ({answer[:80] or 'empty reply'}); the task is not "
                              "finished.", ok=False, usage=usage, data={"final": False, "answer": ""})
        return ToolOutput(content=answer, usage=usage, data={"final": True, "answer": answer})

    def _vote(self, llm: LLM, alias: str, messages: list[dict[str, Any]]) -> ToolOutput:
        # The samples as one batch (decoded together on a batching engine), seeded by the prompt:
        # distinct samples (`chat_batch` seeds rows apart), repeatable for the same prompt.
        base = int(hashlib.sha256(messages[-1]["content"].encode()).hexdigest()[:8], 16)
        replies = llm.chat_batch([messages] * self.samples, max_tokens=self.max_tokens,
                                 temperature=self.temperature, seed=base)
        used = sum((reply.usage for reply in replies), Usage())
        answers = [reply.text.strip() for reply in replies]
        usage = {alias: used}
        votes = Counter(normalise_answer(a) for a in answers if not abstains(a))
        if not votes:
            return ToolOutput(content=f"None of the {self.samples} samples gave an answer; the task is not finished.",
                              ok=False, usage=usage, data={"final": False, "answer": "", "samples": answers})
        top = max(votes.values())
        # Ties go to the answer sampled first; a numeric winner is delivered as its number.
        first = next(a for a in answers if not abstains(a) and votes[normalise_answer(a)] == top)
        answer = final_number(first) or first
        return ToolOutput(content=f"{answer} ({top}/{self.samples} samples agree)", usage=usage,
                          data={"final": True, "answer": answer, "votes": top, "samples": answers})

    def _finish_ask(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        return ToolOutput(content=text.strip() or "(empty reply)", usage=usage)

    def _run_program(self, code: str) -> tuple[str, bool, str, list[tuple[str, float]]]:
        """(observation of the run, ok, stdout, the run as an inner call for the toolbox to price)."""
        assert self.run_code is not None
        started = time.perf_counter()
        try:
            result = self.run_code.run({"code": code})
        except ToolError as exc:
            result = exc
        ran = [(self.run_code.name, time.perf_counter() - started)]  # billed whether it worked or not
        if isinstance(result, ToolError):
            return f"error: {result}", False, "", ran
        stdout = result.data.get("stdout", "") if isinstance(result.data, dict) else ""
        return result.content, result.ok, stdout, ran

    def _finish_reason(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        code = extract_code(text)
        if not code:
            return ToolOutput(content=f"The expert wrote no code. Its reply:\n{text.strip()}", usage=usage)
        output, ok, _, ran = self._run_program(code)
        return ToolOutput(content=f"Code:\n```python\n{code}\n```\nOutput:\n{output}", ok=ok, usage=usage,
                          inner_calls=ran)

    def _finish_program(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        code = extract_code(text)
        if not code:
            return ToolOutput(content="The expert wrote no program; the task is not finished.", ok=False, usage=usage,
                              data={"final": False, "answer": ""})
        output, ok, stdout, ran = self._run_program(code)
        lines = [line.strip() for line in stdout.splitlines() if line.strip()]
        if not ok or not lines:
            why = "failed" if not ok else "printed nothing"
            return ToolOutput(content=f"The program {why}; the task is not finished.\nCode:\n```python\n{code}\n```\n"
                              f"Output:\n{output}", ok=False, usage=usage, data={"final": False, "answer": ""},
                              inner_calls=ran)
        answer = lines[-1]  # programs often print steps first: the answer is the last line
        return ToolOutput(content=f"{answer} (printed by the expert's program)", usage=usage,
                          data={"final": True, "answer": answer, "code": code}, inner_calls=ran)

    def _finish_search(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        query = text.strip().splitlines()[0].strip().strip('"') if text.strip() else ""
        if not query:
            return ToolOutput(content="The expert wrote no query.", ok=False, usage=usage)
        assert self.retrieval is not None
        started = time.perf_counter()
        found = self.retrieval.run({"query": query})
        ran = [(self.retrieval.name, time.perf_counter() - started), *found.inner_calls]
        merged = dict(usage)
        for alias, used in found.usage.items():
            merged[alias] = merged.get(alias, Usage()) + used
        return ToolOutput(content=f"Query: {query}\n{found.content}", ok=found.ok, usage=merged, inner_calls=ran)


LLMResolver = Callable[[str], LLM]
