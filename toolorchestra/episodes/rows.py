"""Instances as verl rows: the one writer and the one reader of the training-set format.

The `preferences` stage exports instances as verl parquet and as a Hugging Face `datasets` folder
(TRL); the verl launcher writes the same rows for its cluster run. Every file holds rows in verl's
RL data format (`verl.utils.dataset.RLHFDataset`):

| column | content |
| --- | --- |
| `data_source` | `toolorchestra/qa/<category>` or `toolorchestra/toolscale/<domain>` |
| `prompt` | chat messages `[{role, content}]`: the system prompt (policy, prices) and the task |
| `ability` | `qa` or `tool_use` |
| `reward_model` | `{"style": "rule", "ground_truth": <JSON text>}`: the QA answer or the tool-use evaluation criteria |
| `extra_info` | `index`, `split`, `instance_id`, `task_id`, `task_kind`, `domain`, `agent_name`, `tools` and `tool_selection` (offered tools, which verl's `ToolAgentLoop` uses to filter its tools per sample), `catalog_tools`, `tool_prices` / `model_prices` (lists of `{name, input_per_mtok, output_per_mtok, per_call, per_second, cached_input_per_mtok}`; the last null, or absent in rows written before it existed, for the input price), `preference` (`{id, kind, instruction, weights: [{key, weight}]}` or null), `default_preference` (the reward's `[{key, weight}]` when there is no preference, or null; absent in rows written before it existed), `task` (the task's JSON text), `tools_kwargs` (per tool of the file `{create_kwargs: {instance_id, task_id, domain}}`, what verl hands a `BaseTool.create`) |
| `agent_name` | the verl agent loop, `tool_agent` by default (without it verl never calls tools) |

The Arrow schema is explicit so every row has the same types, whatever its preference or tools:
mappings whose keys vary by row (a preference vector, prices per tool) are stored as lists of
structs, and free-form JSON (a tau2 task, the ground truth) as text. `decode_extra_info` turns a
row's `extra_info` back into plain mappings for a reward function; `from_verl_row` turns a whole
row back into its `Instance`, and `load_instances(path)` reads any of the files (a `datasets`
folder, the preferences stage's export folder, a parquet file, or JSONL rows).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.instance import Instance, Preference, Split
from toolorchestra.tools.catalog import Price

_PRICE_FIELDS = ("input_per_mtok", "output_per_mtok", "per_call", "per_second", "cached_input_per_mtok")


def dumps(value: Any) -> str:
    """JSON text as the rows store it (sorted keys, so equal values are equal text)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def price_type() -> Any:
    """A `tool_prices` / `model_prices` entry: `{name, input_per_mtok, output_per_mtok, per_call, per_second, cached_input_per_mtok}`."""
    import pyarrow as pa

    return pa.struct([("name", pa.string()), *((f, pa.float64()) for f in _PRICE_FIELDS)])


def preference_type() -> Any:
    import pyarrow as pa

    return pa.struct([
        ("id", pa.string()), ("kind", pa.string()), ("instruction", pa.string()),
        ("weights", pa.list_(pa.struct([("key", pa.string()), ("weight", pa.float64())]))),
    ])


def verl_row_schema(extra_info: Any) -> Any:
    """verl's row schema (`RLHFDataset`) around an `extra_info` struct type."""
    import pyarrow as pa

    return pa.schema([
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", extra_info),
        ("agent_name", pa.string()),
    ])


def arrow_schema(tool_names: list[str]) -> Any:
    """The rows' pyarrow schema; `tools_kwargs` has one field per tool offered in the file."""
    import pyarrow as pa

    price, preference = price_type(), preference_type()
    create = pa.struct([("create_kwargs", pa.struct([
        ("instance_id", pa.string()), ("task_id", pa.string()), ("domain", pa.string())]))])
    extra = pa.struct([
        ("index", pa.int64()), ("split", pa.string()), ("instance_id", pa.string()), ("task_id", pa.string()),
        ("task_kind", pa.string()), ("domain", pa.string()), ("agent_name", pa.string()),
        ("tools", pa.list_(pa.string())), ("tool_selection", pa.list_(pa.string())),
        ("catalog_tools", pa.list_(pa.string())),
        ("tool_prices", pa.list_(price)), ("model_prices", pa.list_(price)),
        ("preference", preference), ("default_preference", preference_type().field("weights").type),
        ("task", pa.string()),
        ("tools_kwargs", pa.struct([(name, create) for name in tool_names]) if tool_names
         else pa.struct([("_none", pa.string())])),
    ])
    return verl_row_schema(extra)


def price_rows(prices: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Prices per name (`Price` objects) as `price_type()` rows, in the mapping's order."""
    return [{"name": name, **{f: _usd(getattr(p, f)) for f in _PRICE_FIELDS}} for name, p in prices.items()]


def _usd(value: float | None) -> float | None:
    return None if value is None else float(value)


def weight_rows(vector: Mapping[str, float]) -> list[dict[str, Any]]:
    """A preference vector as `[{key, weight}]`, sorted by key."""
    return [{"key": k, "weight": float(w)} for k, w in sorted(vector.items())]


def _vector(weights: Any) -> dict[str, float] | None:
    """`weight_rows`' inverse (also a plain mapping); None stays None (rows written before the field)."""
    if not weights:
        return None
    if isinstance(weights, Mapping):
        return {str(k): float(v) for k, v in weights.items()}
    return {w["key"]: float(w["weight"]) for w in weights}


def verl_row(instance: Instance, index: int, agent_name: str, tool_names: list[str]) -> dict[str, Any]:
    """One row; `tool_names` are every tool of the file (each gets `tools_kwargs`, so verl's
    `tools_kwargs.get(name, {})` never meets a null; `tool_selection` says which are offered)."""
    pref = instance.preference
    create = {"create_kwargs": {"instance_id": instance.id, "task_id": instance.task_id, "domain": instance.domain}}
    return {
        "data_source": instance.data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in instance.prompt],
        "ability": instance.kind,
        "reward_model": {"style": "rule", "ground_truth": dumps(instance.ground_truth)},
        "extra_info": {
            "index": index, "split": instance.split, "instance_id": instance.id, "task_id": instance.task_id,
            "task_kind": instance.kind, "domain": instance.domain, "agent_name": agent_name,
            "tools": instance.tools, "tool_selection": instance.tools, "catalog_tools": instance.catalog_tools,
            "tool_prices": price_rows(instance.tool_prices), "model_prices": price_rows(instance.model_prices),
            "preference": None if pref is None else {
                "id": pref.id, "kind": pref.kind, "instruction": pref.instruction,
                "weights": weight_rows(pref.vector)},
            "default_preference": None if instance.default_preference is None else weight_rows(instance.default_preference),
            "task": dumps(instance.task),
            "tools_kwargs": {name: create for name in tool_names} if tool_names else {"_none": None},
        },
        "agent_name": agent_name,
    }


def to_table(instances: list[Instance], agent_name: str = "tool_agent") -> Any:
    """The instances as one pyarrow table with the explicit schema."""
    import pyarrow as pa

    names = sorted({t for inst in instances for t in inst.tools})
    rows = [verl_row(inst, i, agent_name, names) for i, inst in enumerate(instances)]
    return pa.Table.from_pylist(rows, schema=arrow_schema(names))


def write_verl_parquet(instances: list[Instance], path: str | Path, agent_name: str = "tool_agent") -> Path:
    """One parquet file in verl's format (written to a temporary sibling, then renamed)."""
    import os
    import tempfile

    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        pq.write_table(to_table(instances, agent_name), tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_hf_dataset(splits: Mapping[Split, list[Instance]], folder: str | Path, agent_name: str = "tool_agent") -> Path:
    """A `datasets.DatasetDict` (one split per key) saved with `save_to_disk` into `folder`,
    which must not exist yet or be empty (callers stage it and rename)."""
    import datasets
    from datasets.table import InMemoryTable

    folder = Path(folder)
    dataset = datasets.DatasetDict({
        split: datasets.Dataset(InMemoryTable(to_table(list(instances), agent_name)))
        for split, instances in splits.items()
    })
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a stage's log is not a terminal
    try:
        dataset.save_to_disk(str(folder))
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    return folder


def decode_extra_info(extra_info: Mapping[str, Any]) -> dict[str, Any]:
    """A row's `extra_info` with plain mappings: `preference_vector` ({key: weight} or None),
    `tool_prices` / `model_prices` ({name: {field: USD}}), `task` (parsed JSON), and
    `tools_kwargs` reduced to the offered tools."""
    out = dict(extra_info)
    pref = extra_info.get("preference")
    out["preference_vector"] = {w["key"]: w["weight"] for w in pref["weights"]} if pref else None
    out["default_preference"] = _vector(extra_info.get("default_preference"))
    for key in ("tool_prices", "model_prices"):
        # .get: rows written before `cached_input_per_mtok` existed lack it (the input price then)
        out[key] = {p["name"]: {f: p.get(f) for f in _PRICE_FIELDS} for p in extra_info.get(key) or []}
    out["task"] = json.loads(extra_info["task"]) if isinstance(extra_info.get("task"), str) else extra_info.get("task")
    offered = set(extra_info.get("tools") or [])
    out["tools_kwargs"] = {k: v for k, v in (extra_info.get("tools_kwargs") or {}).items() if k in offered and v}
    return out


def decode_ground_truth(reward_model: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(reward_model["ground_truth"])


# ------------------------------------------------------------------------------ reading


def _prices(value: Any) -> dict[str, Price]:
    if not value:
        return {}
    if isinstance(value, Mapping):  # {name: {field: usd}}
        return {k: Price(**v) for k, v in value.items()}
    return {p["name"]: Price(**{k: v for k, v in p.items() if k != "name"}) for p in value}


def _preference(value: Mapping[str, Any] | None) -> Preference | None:
    if not value:
        return None
    weights = value.get("weights")
    vector = ({w["key"]: float(w["weight"]) for w in weights} if isinstance(weights, list)
              else {k: float(v) for k, v in (weights or value.get("vector") or {}).items()})
    return Preference(id=value["id"], kind=value["kind"], instruction=value["instruction"], vector=vector)


def from_verl_row(row: Mapping[str, Any], *, source: str = "<row>") -> Instance:
    """The instance a row was written from (`verl_row`'s inverse)."""
    try:
        extra = dict(row["extra_info"])
        task = extra.get("task")
        task = json.loads(task) if isinstance(task, str) else dict(task or {})
        truth = (row.get("reward_model") or {}).get("ground_truth")
        truth = json.loads(truth) if isinstance(truth, str) else dict(truth or {})
        tools = list(extra.get("tools") or [])
        catalog_tools = list(extra.get("catalog_tools") or [])
        return Instance(
            id=str(extra.get("instance_id") or extra.get("index")), split=extra.get("split") or "train",
            kind=extra.get("task_kind") or row.get("ability"), task_id=str(extra.get("task_id") or task.get("id")),
            data_source=row.get("data_source") or "toolorchestra", domain=extra.get("domain"), task=task,
            ground_truth=truth, preference=_preference(extra.get("preference")),
            default_preference=_vector(extra.get("default_preference")),
            catalog_tools=catalog_tools, domain_tools=[t for t in tools if t not in set(catalog_tools)],
            tool_prices=_prices(extra.get("tool_prices")), model_prices=_prices(extra.get("model_prices")),
            prompt=[{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, f"not a training-instance row (verl format with extra_info): {exc}") from None


def _rows_of_folder(path: Path, split: str, missing_ok: bool = False) -> list[dict[str, Any]]:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except FileNotFoundError:
        raise ConfigError(path, "not a training set: neither a `datasets` folder nor the preferences stage's "
                          "export (hf/, verl/, manifest.json); re-run the preferences stage") from None
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            if missing_ok:
                return []
            raise ConfigError(path, f"no split {split!r}; the folder has {sorted(loaded)}", key="split")
        loaded = loaded[split]
    return loaded.to_list()


def _rows_of_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ConfigError(path, f"line {lineno}: not JSON: {exc.msg}") from None
    return rows


def load_instances(path: str | Path, *, split: str = "train", missing_ok: bool = False) -> list[Instance]:
    """Instances from a `datasets` folder (`split` of a DatasetDict), a parquet file, or JSONL rows.

    `missing_ok`: a folder without `split` gives no instances instead of an error, and a file gives
    only its rows marked with `split` (a file's rows are otherwise all read, whatever their split).

    The `preferences` stage's export folder (`data/datasets`: `hf/`, `verl/`, `manifest.json`) is
    accepted as is and read from its `hf/` folder.
    """
    path = Path(path)
    if not path.exists():
        raise ConfigError(path, "training set not found (run the preferences stage first)")
    if (path / "hf" / "dataset_dict.json").is_file():
        path = path / "hf"
    rows: Iterable[Mapping[str, Any]]
    if path.is_dir():
        rows = _rows_of_folder(path, split, missing_ok)
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        rows = _rows_of_jsonl(path)
    out = [from_verl_row(r, source=f"{path}[{i}]") for i, r in enumerate(rows)]
    if missing_ok and not path.is_dir():
        out = [i for i in out if i.split == split]
    ids = [i.id for i in out]
    if len(set(ids)) != len(ids):
        raise ConfigError(path, "instance ids are not unique")
    return out
