"""What the price sheet's place in the prompt costs: first-turn prefill of held-out episodes on llama.cpp.

    python benchmarks/bench_prompt_cache.py [--items 24] [--prices jittered|catalog|both] [--seed 0] [--json]

Reads the flow's held-out instances (`data/datasets`, eval split: run the flow up to the
`preferences` stage first), a seeded sample of `--items`, and decodes each one's first policy
turn (system prompt, offered tools, user turn; one new token) with SmolLM2-135M on llama.cpp, one
fresh engine per arm, same run:

- `system` (the flow's layout): the price sheet closes the system prompt, and the chat template
  lists the tools after it, so two instances whose sheets differ share only the prefix before the
  sheets, and their tool lists are read again;
- `task` (tried on 2026-12-04 and reverted, docs/design.md): the sheet opens the user turn, so
  instances of a domain share the system prompt and the tool list up to the first tool one offers
  and the other does not, which the engine's prefix cache (`llm.llamacpp`) encodes once.

Each layout is timed with the instances' own prices (`jittered`: per instance, as in training and
its rollouts) and with the catalog's (`catalog`: as the evaluate stage renders its tasks, where
two instances offering the same tools have the same sheet in either layout). With `--json` the
last line is one JSON object with each arm's seconds and prompt tokens and the speed-up per price
mode.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
SHEET = "\n\nPrices of your tools (USD):"


def split_sheet(prompt: list[dict]) -> tuple[str, str | None, str]:
    """(system prompt without the sheet, the sheet or None, user turn) of a first turn."""
    system, user = prompt[0]["content"], prompt[1]["content"]
    head, found, sheet = system.partition(SHEET)
    return (head, (found + sheet).strip(), user) if found else (system, None, user)


def layout(prompt: list[dict], arm: str, sheet: str | None = None) -> list[dict]:
    """One instance's first turn in `arm`'s layout, with its own sheet or, if it has one, `sheet`."""
    system, own, user = split_sheet(prompt)
    if own is None:  # no catalog tool offered, so no sheet to place
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    sheet = sheet or own
    if arm == "system":
        return [{"role": "system", "content": f"{system}\n\n{sheet}"}, {"role": "user", "content": user}]
    return [{"role": "system", "content": system}, {"role": "user", "content": f"{sheet}\n\n{user}"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=24, help="held-out instances decoded per arm")
    parser.add_argument("--prices", choices=["jittered", "catalog", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    if args.items < 1:
        raise SystemExit("bench_prompt_cache: --items must be at least 1")

    from bench_routing import train_inputs  # this script's folder is on sys.path

    from toolorchestra.core.settings import Settings, find_workspace
    from toolorchestra.episodes.environment import RolloutEnvironment
    from toolorchestra.episodes.rows import load_instances
    from toolorchestra.llm.config import catalog_llms
    from toolorchestra.llm.llamacpp import LlamaCppLLM
    from toolorchestra.llm.local import LocalLLM
    from toolorchestra.preferences.assemble import price_sheet
    from toolorchestra.rl.train import resolve_model_folder

    settings = Settings(workspace=find_workspace(REPO))
    try:
        config, catalog, _, domains, _ = train_inputs(settings)
        held = load_instances(settings.workspace / "data" / "datasets", split="eval")
    except Exception as exc:  # missing or broken flow data: one line, no traceback
        raise SystemExit(f"bench_prompt_cache: {exc} (run the flow up to the preferences stage first)") from None
    random.Random(args.seed).shuffle(held)
    items = held[:args.items]
    env = RolloutEnvironment(catalog, settings, domains, config.episode,
                             llm_for=catalog_llms(catalog.models, "llamacpp", settings))
    specs = [env.setup(item).specs for item in items]
    local = LocalLLM(resolve_model_folder(config.base_model, settings), device="cpu")
    gguf_cache = settings.workspace / ".orchestra" / "models" / "gguf"

    out: dict = {"items": len(items)}
    for mode in ["jittered", "catalog"] if args.prices == "both" else [args.prices]:
        # None keeps each instance's own (jittered) sheet
        sheets = [None if mode == "jittered" else
                  price_sheet(catalog, i.catalog_tools, catalog.tool_prices(), catalog.model_prices()) for i in items]
        for arm in ("system", "task"):
            prompts = [layout(i.prompt, arm, sheet) for i, sheet in zip(items, sheets, strict=True)]
            llm = LlamaCppLLM.from_local(local, gguf_cache)
            try:
                began = time.perf_counter()
                replies = llm.chat_batch(prompts, tools_per_row=specs, max_tokens=1)
                seconds = round(time.perf_counter() - began, 2)
            finally:
                llm.close()
            tokens = sum(r.usage.prompt_tokens for r in replies)
            out[f"{mode}_seconds_{arm}"], out[f"{mode}_prompt_tokens_{arm}"] = seconds, tokens
            where = "closing the system prompt" if arm == "system" else "opening the user turn"
            print(f"{mode} prices, sheet {where}: {len(items)} first turns, {tokens} prompt tokens, {seconds} s")
        out[f"{mode}_speedup"] = round(out[f"{mode}_seconds_system"] / out[f"{mode}_seconds_task"], 2)
        print(f"{mode} prices: first-turn prefill x{out[f'{mode}_speedup']} with the sheet in the user turn")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
