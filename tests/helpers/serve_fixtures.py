"""Helpers of the server tests and benchmark: a scripted orchestrator policy and a served model of it."""

from __future__ import annotations

import re
import threading

from toolorchestra.llm.base import LLM, Completion, Usage
from toolorchestra.llm.hermes import format_tool_call


class Calculator(LLM):
    """An orchestrator policy that computes "What is EXPR?" with one code-interpreter call and
    answers with what the program printed; records the size of each batched generation.
    `gate` (an Event) holds every generation until it is set."""

    model = "calculator"

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[int] = []
        self.gate = gate
        self.prompts: list[list[dict]] = []

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        return self.chat_batch([messages], tools=tools, max_tokens=max_tokens)[0]

    def chat_batch(self, batch, *, tools=None, tools_per_row=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        if self.gate is not None:
            self.gate.wait(30)
        self.batches.append(len(batch))
        self.prompts.extend(batch)
        return [self._reply(m) for m in batch]

    @staticmethod
    def _reply(messages) -> Completion:
        last = messages[-1]
        usage = Usage(prompt_tokens=200, completion_tokens=20)
        if last["role"] == "tool":  # the second turn: an engine with a prefix cache kept the first's prompt
            usage = Usage(prompt_tokens=200, completion_tokens=20, cached_prompt_tokens=150)
            return Completion(text=last["content"].strip().splitlines()[-1], usage=usage, model="calculator")
        match = re.search(r"What is (.+?)\?", last["content"])
        expression = match.group(1) if match else "0"
        return Completion(text=format_tool_call("code_interpreter", {"code": f"print({expression})"}),
                          usage=usage, model="calculator")


CATALOG = {
    "models": {},
    "tools": [{"name": "code_interpreter", "kind": "code", "description": "Run Python.",
               "backend": {"type": "code_interpreter", "wall_time_s": 10}, "price": {"per_call": 0.0001}}],
}


def served_calculator(policy: LLM, settings, *, default_vector=None):
    from toolorchestra.agent.loop import SYSTEM_PROMPT
    from toolorchestra.registry.policy import RegisteredModel
    from toolorchestra.serving.models import ServedModel
    from toolorchestra.tools.catalog import Price, parse_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    catalog = parse_catalog(CATALOG, source="<test catalog>")
    registered = RegisteredModel(llm=policy, catalog=catalog, manifest={}, name="orchestrator", version="1",
                                 run_id=None, price=Price(input_per_mtok=1.0, output_per_mtok=2.0),
                                 aliases=["champion"])
    return ServedModel(registered=registered, toolbox=build_toolbox(catalog, settings), system_prompt=SYSTEM_PROMPT,
                       max_turns=4, max_tokens=64, default_vector=dict(default_vector or {}))


