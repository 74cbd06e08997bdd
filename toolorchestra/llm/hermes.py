"""Hermes-style tool calls in model text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

`parse_tool_call` extracts the first call of a turn (the orchestrator makes one call per turn) and
says precisely what is wrong when it cannot, so the error can be shown to the model.

Model output is hostile input: a call body longer than `MAX_CALL_CHARS` or nested deeper than
`MAX_DEPTH` (arrays and objects) is a `MalformedToolCall` before any JSON is decoded, so neither
the decoder nor anything downstream (schema validation, `json.dumps` of the trajectory) can hit
Python's recursion limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
MAX_CALL_CHARS = 200_000
"""Longest call body (or arguments string) parsed; far above any real call."""
MAX_DEPTH = 32
"""Deepest nesting of arrays/objects in a call (the call object itself is level 1)."""
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


class ParsedCall(BaseModel):
    name: str
    arguments: dict[str, Any]


class MalformedToolCall(ValueError):
    """The text has a tool-call block that is not a valid call."""


def strip_tool_calls(text: str) -> str:
    """The text around the tool-call blocks (the model's reasoning)."""
    return _BLOCK.sub("", text).strip()


def check_json_shape(text: str, *, what: str = "tool call", base_depth: int = 0) -> None:
    """Refuse JSON text that is too long or too deeply nested, in one linear scan (no recursion)."""
    if len(text) > MAX_CALL_CHARS:
        raise MalformedToolCall(f"{what} is {len(text)} characters; at most {MAX_CALL_CHARS} are accepted")
    depth = deepest = base_depth
    for bracket in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if bracket.group() in "[{" else -1
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise MalformedToolCall(f"{what} nests {deepest} levels of arrays/objects; at most {MAX_DEPTH} are accepted")


def check_value_depth(value: Any, *, what: str = "arguments", base_depth: int = 1) -> None:
    """The same bound for an already-decoded value (a backend's structured call), iteratively."""
    stack = [(value, base_depth)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth + 1 > MAX_DEPTH:
                raise MalformedToolCall(f"{what} nest more than {MAX_DEPTH} levels of arrays/objects")
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))


def _loads(text: str, prefix: str, *, trailing_ok: bool = False) -> Any:
    try:
        return json.JSONDecoder().raw_decode(text)[0] if trailing_ok else json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedToolCall(f"{prefix}not valid JSON: {exc.msg} at char {exc.pos}") from None
    except RecursionError:  # unreachable after check_json_shape; kept so no input can crash a caller
        raise MalformedToolCall(f"{prefix}nested too deeply") from None


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Arguments as an object; a JSON string holding an object is accepted (OpenAI style)."""
    if isinstance(raw, str):
        check_json_shape(raw, what="arguments", base_depth=1)
        raw = _loads(raw, "arguments are ") if raw.strip() else {}
    else:
        check_value_depth(raw)
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
    check_json_shape(body)
    obj = _loads(body, "", trailing_ok=True)
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
