"""verl's side of the training set: our agent loop's name and the tool-config YAML.

The rows themselves are written and read by `toolorchestra.episodes.rows` (the same rows as the
`preferences` stage's export); the launcher writes them with `agent_name = AGENT_NAME`, which
selects our registered agent loop (`orchestra_agent`): without it verl runs its single-turn loop
and tools are silently never called.

`tool_config(...)` lists every tool any instance offers as a thin `BaseTool` adapter
(`toolorchestra.rl.verl.tools.OrchestraTool`) with its OpenAI schema; the agent loop narrows the
list per episode to the tools that episode offers.
"""

from __future__ import annotations

from typing import Any

from toolorchestra.core.errors import ConfigError

AGENT_NAME = "orchestra_agent"
TOOL_CLASS = "toolorchestra.rl.verl.tools.OrchestraTool"


def verl_schema(spec: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI tool spec in the subset verl's `OpenAIFunctionToolSchema` accepts: every
    property needs a `type` (nested detail such as `items` is dropped by verl; the tool itself
    still validates its arguments against its full schema)."""
    fn = spec["function"]
    params = dict(fn.get("parameters") or {"type": "object", "properties": {}})
    props = {}
    for name, prop in (params.get("properties") or {}).items():
        prop = dict(prop) if isinstance(prop, dict) else {}
        kept = {"type": prop.get("type", "string")}
        if prop.get("description"):
            kept["description"] = prop["description"]
        if isinstance(prop.get("enum"), list):
            kept["enum"] = prop["enum"]
        props[name] = kept
    return {"type": "function", "function": {
        "name": fn["name"], "description": fn.get("description") or fn["name"],
        "parameters": {"type": "object", "properties": props, "required": list(params.get("required") or [])},
    }}


def tool_config(specs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """verl's tool-config document for these tool specs (name -> OpenAI spec)."""
    return {"tools": [{"class_name": TOOL_CLASS, "config": {"type": "native"}, "tool_schema": verl_schema(spec)}
                      for _, spec in sorted(specs.items())]}


def collect_specs(instance_specs: list[list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every tool offered anywhere, by name; the same name with two different schemas is an error
    (verl keeps one schema per tool name)."""
    out: dict[str, dict[str, Any]] = {}
    for specs in instance_specs:
        for spec in specs:
            name = spec["function"]["name"]
            if name in out and verl_schema(out[name]) != verl_schema(spec):
                raise ConfigError(None, f"tool {name!r} has different schemas in two domains; verl needs one "
                                  "schema per tool name: rename one of them", key="tools")
            out.setdefault(name, spec)
    return out
