"""Training instances as verl parquet (`RLHFDataset`'s format) and the tool-config YAML.

Rows have the columns verl reads (`data_source`, `prompt` as chat messages, `ability`,
`reward_model.ground_truth`, `extra_info`, `agent_name`), with the same `extra_info` fields as the
`preferences` stage's export (`toolorchestra.preferences.export`), so `instances.from_verl_row`
decodes either. `agent_name` selects our registered agent loop (`orchestra_agent`): without it
verl runs its single-turn loop and tools are silently never called.

`tool_config(...)` lists every tool any instance offers as a thin `BaseTool` adapter
(`toolorchestra.rl.verl.tools.OrchestraTool`) with its OpenAI schema; the agent loop narrows the
list per episode to the tools that episode offers.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.preferences.export import preference_type, price_rows, price_type, verl_row_schema
from toolorchestra.rl.instances import TrainInstance

AGENT_NAME = "orchestra_agent"
TOOL_CLASS = "toolorchestra.rl.verl.tools.OrchestraTool"


def verl_row(instance: TrainInstance, index: int, *, tools: list[str] | None = None) -> dict[str, Any]:
    offered = tools if tools is not None else [*instance.domain_tools, *instance.catalog_tools]
    truth = ({"kind": "qa", "answer": str(instance.answer)} if instance.kind == "qa"
             else {"kind": "tool_use", "task_id": instance.task_id, "domain": instance.domain})
    pref = None
    if instance.preference is not None:
        pref = {"id": "", "kind": "", "instruction": instance.preference_text or "",
                "weights": [{"key": k, "weight": float(w)} for k, w in sorted(instance.preference.items())]}
    return {
        "data_source": instance.data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in instance.prompt],
        "ability": instance.kind,
        "reward_model": {"style": "rule", "ground_truth": json.dumps(truth, ensure_ascii=False)},
        "extra_info": {
            "index": index, "instance_id": instance.id, "task_id": instance.task_id, "task_kind": instance.kind,
            "domain": instance.domain, "agent_name": AGENT_NAME, "tools": offered, "tool_selection": offered,
            "catalog_tools": list(instance.catalog_tools), "domain_tools": list(instance.domain_tools),
            "tool_prices": price_rows(dict(sorted(instance.tool_prices.items()))),
            "model_prices": price_rows(dict(sorted(instance.model_prices.items()))),
            "preference": pref,
            "task": json.dumps(instance.task, ensure_ascii=False),
        },
        "agent_name": AGENT_NAME,
    }


def _schema() -> Any:
    """The `preferences` export's schema (`toolorchestra.preferences.export`) with `domain_tools`
    and without `split` / `tools_kwargs` (the agent loop builds its tools from `tools`)."""
    import pyarrow as pa

    price, strings = price_type(), pa.list_(pa.string())
    extra = pa.struct([
        ("index", pa.int64()), ("instance_id", pa.string()), ("task_id", pa.string()), ("task_kind", pa.string()),
        ("domain", pa.string()), ("agent_name", pa.string()), ("tools", strings), ("tool_selection", strings),
        ("catalog_tools", strings), ("domain_tools", strings), ("tool_prices", pa.list_(price)),
        ("model_prices", pa.list_(price)), ("preference", preference_type()), ("task", pa.string()),
    ])
    return verl_row_schema(extra)


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(pa.Table.from_pylist(rows, schema=_schema()), tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


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
