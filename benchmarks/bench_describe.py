"""Describe-stage throughput: the catalog measurement (`preferences.measure.measure`), old engine vs new.

    python benchmarks/bench_describe.py [--samples 2] [--max-turns 3] [--max-tokens 128] [--weights f16] [--workers 8]
                                        [--torch-threads N] [--json]

The describe stage's own measurement on a freshly synthesized `library` domain (its QA items and
tool-use tasks, local search over its documents) with the embedded catalog (every LLM tool backed
by SmolLM2), the `params.yaml` settings of the stage by default, run twice on the same samples:

- **old**: the catalog's local model on the transformers engine (`engine: transformers`), one call
  at a time (the stage's `max_workers: 1` until this round);
- **new**: the same model on the llama.cpp engine (`engine: llamacpp`; GGUF converted before timing)
  with `--workers` concurrent calls, which the engine merges into lockstep batches.

It prints measured calls per second for each, the speed-up, and the records (tool, model, category,
task, correct) that differ. With `--json` the last line is one JSON object with `calls_per_s_old`,
`calls_per_s_new`, `speedup`, `outcomes_identical` and `outcome_differences`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    from bench_eval import parse_common, synthesize

    from toolorchestra.llm.gguf_export import GGUFWeights

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2, help="samples per category (describe.measure)")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--weights", choices=get_args(GGUFWeights), default="f16")
    parser.add_argument("--workers", type=int, default=8,
                        help="concurrent calls of the new path (merged into lockstep batches by llama.cpp); old: 1")
    args = parse_common(parser)

    from toolorchestra.core.settings import Settings, find_workspace
    from toolorchestra.describe.measure import DescribeConfig, measure
    from toolorchestra.episodes.pool import load_pool
    from toolorchestra.llm.config import LlamaCppLLMConfig, build_llm, on_engine
    from toolorchestra.llm.llamacpp import built_features
    from toolorchestra.tools.catalog import load_embedded_catalog

    settings = Settings(workspace=find_workspace(Path(__file__).resolve().parent))
    config = DescribeConfig(samples_per_category=args.samples, categories=["qa_numeric", "qa_lookup", "tool_use"],
                            max_turns=args.max_turns, max_tokens=args.max_tokens)
    workers = {"old": 1, "new": args.workers}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = synthesize(Path(tmp), 8)
        pool = load_pool(root)
        catalog = load_embedded_catalog().with_search_corpus(root / "qa" / "docs")
        import torch

        print(f"describe measurement: {args.samples} samples per category, max_turns={args.max_turns}, "
              f"max_tokens={args.max_tokens}, GGUF {args.weights}, torch threads {torch.get_num_threads()}, "
              f"load average {os.getloadavg()[0]:.1f}")
        for label, engine in (("old", "transformers"), ("new", "llamacpp")):
            def llm_for(alias: str, engine=engine):
                backend = on_engine(catalog.models[alias].backend, engine)
                if isinstance(backend, LlamaCppLLMConfig):
                    backend = backend.model_copy(update={"weights": args.weights})
                return build_llm(backend, settings)

            for alias in catalog.models:
                llm_for(alias)  # load (and convert) before timing
            started = time.perf_counter()
            measurement = measure(catalog, pool, settings, config.model_copy(update={"max_workers": workers[label]}),
                                  llm_for=llm_for)
            seconds = time.perf_counter() - started
            records = {(r.tool, r.model, r.category, r.task_id): r.correct for r in measurement.records}
            results[label] = {"seconds": seconds, "calls": len(records), "records": records}
            print(f"{label} ({engine}, {workers[label]} worker(s)): {len(records)} measured calls/episodes in {seconds:6.1f}s = "
                  f"{len(records) / seconds:.3f}/s, correct {sum(records.values())}", flush=True)
    old, new = results["old"], results["new"]
    differences = [{"record": list(k), "old": old["records"].get(k), "new": new["records"].get(k)}
                   for k in sorted(set(old["records"]) | set(new["records"]))
                   if old["records"].get(k) != new["records"].get(k)]
    speedup = old["seconds"] / new["seconds"]
    print(f"speed-up new / old: x{speedup:.2f}; outcomes identical: {not differences} "
          f"({len(differences)} of {len(old['records'])} differ)")
    for d in differences:
        print(f"  differs: {d}")
    if args.json:
        print(json.dumps({"benchmark": "describe", "samples_per_category": args.samples, "weights": args.weights,
                          "torch_threads": torch.get_num_threads(), "llamacpp_kernels": built_features(),
                          "workers_new": args.workers, "calls_per_s_old": old["calls"] / old["seconds"],
                          "calls_per_s_new": new["calls"] / new["seconds"], "speedup": speedup,
                          "outcomes_identical": not differences, "outcome_differences": differences}))


if __name__ == "__main__":
    main()
