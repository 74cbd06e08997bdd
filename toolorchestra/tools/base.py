"""The interface every tool implements, and what a call returns.

A tool takes JSON arguments (already validated against its JSON schema by the caller) and returns
a `ToolOutput`: the observation text the orchestrator reads, plus accounting. A tool never prices
itself: it reports the tokens each model used (keyed by the catalog's model alias) and the caller
prices them from the catalog, so prices come from one place. A tool that runs another tool (an
expert's program in the code interpreter) reports the run in `inner_calls`, priced the same way.

A tool signals a problem the model can react to (bad input, not configured, a timeout) by raising
`ToolError`; the agent loop turns it into an error observation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, Field

from toolorchestra.core.errors import OrchestraError
from toolorchestra.llm.base import Usage

__all__ = ["Tool", "ToolError", "ToolOutput", "Usage"]


class ToolError(OrchestraError):
    """A tool call failed in a way the orchestrator should see as an observation."""


class ToolOutput(BaseModel):
    content: str
    """The observation shown to the orchestrator."""
    ok: bool = True
    usage: dict[str, Usage] = Field(default_factory=dict)
    """Tokens used inside the tool, per catalog model alias (empty for non-LLM tools)."""
    data: Any = None
    """Structured result for the caller (e.g. the final answer), never shown to the model."""
    inner_calls: list[tuple[str, float]] = Field(default_factory=list)
    """Runs of other tools made inside this one, (tool name, seconds): the caller prices each as a
    call of that tool, so an expert's sandbox run costs what the policy's own run of it costs."""


VALIDATION_ONLY = frozenset({"additionalProperties", "minLength", "maxLength", "pattern", "default"})


def shown_schema(node: Any) -> Any:
    """`node` without the `VALIDATION_ONLY` keywords (a property named like one is kept)."""
    if isinstance(node, dict):
        return {k: (shown_schema(v) if k != "properties" else {p: shown_schema(s) for p, s in v.items()})
                for k, v in node.items() if k not in VALIDATION_ONLY or k == "properties"}
    if isinstance(node, list):
        return [shown_schema(v) for v in node]
    return node


class Tool(ABC):
    """A callable tool with an OpenAI-style function schema."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""
    keep_last_line: bool = False
    """Whether a long observation keeps its last line when the toolbox shortens it (a program's
    error or result comes last; a search's best passage first)."""
    deterministic: bool = False
    """Whether the same arguments give the same result (no sampling, no network, no clock): a
    failed call repeated as is would fail again, so the agent loop does not run it twice in a row."""

    def spec(self) -> dict[str, Any]:
        """The OpenAI / Hermes function-tool schema shown to the model. Keywords that only
        validate (`VALIDATION_ONLY`) are left out: the toolbox enforces them on every call with
        the full `parameters`, and a small policy reads the schema on every turn."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": shown_schema(self.parameters),
            },
        }

    @abstractmethod
    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        """Execute with validated arguments. Raise `ToolError` for problems the model should see."""
