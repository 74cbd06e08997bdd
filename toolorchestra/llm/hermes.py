"""Hermes-style tool calls in model text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

`parse_tool_call` extracts the first call of a turn (the orchestrator makes one call per turn) and
says precisely what is wrong when it cannot, so the error can be shown to the model.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


class ParsedCall(BaseModel):
    name: str
    arguments: dict[str, Any]


class MalformedToolCall(ValueError):
    """The text has a tool-call block that is not a valid call."""


def strip_tool_calls(text: str) -> str:
    """The text around the tool-call blocks (the model's reasoning)."""
    return _BLOCK.sub("", text).strip()


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Arguments as an object; a JSON string holding an object is accepted (OpenAI style)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise MalformedToolCall(f"arguments are not valid JSON: {exc.msg} at char {exc.pos}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise MalformedToolCall(f"arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def parse_tool_call(text: str) -> ParsedCall | None:
    """The first tool call in `text`, None when there is none.

    Raises `MalformedToolCall` when a `<tool_call>` block exists but is not
    `{"name": str, "arguments": object}`.

    >>> parse_tool_call('x <tool_call>\\n{"name": "f", "arguments": {"a": 1}}\\n</tool_call>')
    ParsedCall(name='f', arguments={'a': 1})
    >>> parse_tool_call("no call") is None
    True
    """
    match = _BLOCK.search(text)
    if match is None:
        return None
    body = match.group(1).strip()
    if not body:
        raise MalformedToolCall("empty <tool_call> block")
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError as exc:
        raise MalformedToolCall(f"not valid JSON: {exc.msg} at char {exc.pos}") from None
    if not isinstance(obj, dict):
        raise MalformedToolCall(f"expected a JSON object, got {type(obj).__name__}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise MalformedToolCall('missing "name" (a string)')
    unknown = set(obj) - {"name", "arguments", "parameters"}
    if unknown:
        raise MalformedToolCall(f"unexpected keys {sorted(unknown)}; use only \"name\" and \"arguments\"")
    return ParsedCall(name=name, arguments=parse_arguments(obj.get("arguments", obj.get("parameters"))))


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of a call, as the chat template renders it."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"
