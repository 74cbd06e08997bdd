"""LLMs as tools: the paper's `search`, `enhance_reasoning` and `answer`, plus a plain `ask`.

Each call names an expert by its catalog alias (the `model` argument). The expert sees the task
and what the episode has gathered so far (an `EpisodeContext` the agent loop keeps), so the
orchestrator can delegate with a short call, as in the paper. The tool reports the expert's
tokens under its alias; the toolbox prices them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
}


def extract_code(text: str) -> str | None:
    match = _CODE.search(text)
    return match.group(1).strip() if match else None


class ExpertTool(Tool):
    """An LLM-backed tool. `llms` maps each allowed alias to its backend."""

    def __init__(
        self,
        name: str,
        description: str,
        role: str,
        llms: dict[str, LLM],
        *,
        max_tokens: int = 256,
        run_code: Tool | None = None,
        retrieval: Tool | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if role not in _PROMPTS:
            raise ValueError(f"unknown expert role {role!r}; known: {sorted(_PROMPTS)}")
        if role == "reason" and run_code is None:
            raise ValueError(f"{name}: a reasoning expert needs a code interpreter")
        if role == "search" and retrieval is None:
            raise ValueError(f"{name}: a search expert needs a retrieval tool")
        self.name, self.description, self.role = name, description, role
        self.llms, self.max_tokens = llms, max_tokens
        self.run_code, self.retrieval = run_code, retrieval
        self.parameters = parameters or {
            "type": "object",
            "properties": {
                "model": {"type": "string", "enum": sorted(llms), "description": "which expert to ask"},
                "question": {
                    "type": "string",
                    "description": "what to ask; defaults to the task being solved",
                },
            },
            "required": ["model"],
            "additionalProperties": False,
        }

    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        return self.run_in_context(arguments, None)

    def run_in_context(self, arguments: dict[str, Any], context: EpisodeContext | None) -> ToolOutput:
        alias = arguments["model"]
        llm = self.llms.get(alias)
        if llm is None:
            raise ToolError(f"unknown model {alias!r}; choose one of {sorted(self.llms)}")
        question = arguments.get("question")
        if context is None:
            if not question:
                raise ToolError("`question` is required when no task context is available")
            context = EpisodeContext(task=question)
        prompt = context.render()
        if question and question != context.task:
            prompt += f"\n\nQuestion from the orchestrator:\n{question}"
        messages = [{"role": "system", "content": _PROMPTS[self.role]}, {"role": "user", "content": prompt}]
        reply = llm.chat(messages, max_tokens=self.max_tokens)  # LLMError -> error observation upstream
        usage = {alias: reply.usage}
        return getattr(self, f"_finish_{self.role}")(reply.text, usage)

    def _finish_answer(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        answer = text.strip()
        return ToolOutput(content=answer or "(the expert gave no answer)", usage=usage,
                          data={"final": True, "answer": answer})

    def _finish_ask(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        return ToolOutput(content=text.strip() or "(empty reply)", usage=usage)

    def _finish_reason(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        code = extract_code(text)
        if not code:
            return ToolOutput(content=f"The expert wrote no code. Its reply:\n{text.strip()}", usage=usage)
        assert self.run_code is not None
        try:
            result = self.run_code.run({"code": code})
            output, ok = result.content, result.ok
        except ToolError as exc:
            output, ok = f"error: {exc}", False
        return ToolOutput(content=f"Code:\n```python\n{code}\n```\nOutput:\n{output}", ok=ok, usage=usage)

    def _finish_search(self, text: str, usage: dict[str, Usage]) -> ToolOutput:
        query = text.strip().splitlines()[0].strip().strip('"') if text.strip() else ""
        if not query:
            return ToolOutput(content="The expert wrote no query.", ok=False, usage=usage)
        assert self.retrieval is not None
        found = self.retrieval.run({"query": query})
        merged = dict(usage)
        for alias, used in found.usage.items():
            merged[alias] = merged.get(alias, Usage()) + used
        return ToolOutput(content=f"Query: {query}\n{found.content}", ok=found.ok, usage=merged)


LLMResolver = Callable[[str], LLM]
