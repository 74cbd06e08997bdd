"""Load test of `orchestra serve-model`: N concurrent chat completions over loopback HTTP.

    python benchmarks/bench_serve.py [--requests 32] [--policy tiny|smollm2] [--max-tokens 16] [--json]
    python benchmarks/bench_serve.py --compare-engines [--policy smollm2] [--requests 16] [--json]

The server is the real app (`toolorchestra.serving`) under uvicorn on 127.0.0.1 with a bearer
token; the client is the official `openai` package (async, all requests in flight at once). The
policy is a random-weight model of SmolLM2's architecture with the real tokenizer and chat
template (`--policy tiny`, default: fast, same code paths) or the real SmolLM2-135M-Instruct, the
catalog the code interpreter at its price, the training system prompt with its price sheet. Every
response is checked (200, an assistant message, usage and cost > 0, the episode ran its turns).

Two servers in the same run: micro-batched (`--max-batch`, 10 ms window: concurrent requests share
one batched generation per turn) and one-at-a-time (`max_batch=1`, the baseline: what a lock
around each request would give). Printed: p50/p95 latency, requests/s, mean batch size, and the
throughput ratio batched / one-at-a-time. `--json`: the last line is one JSON object.

`--compare-engines`: instead, the micro-batched server with the policy on transformers and then on
llama.cpp (the same weights converted to GGUF, what `serve-model --engine auto` runs on a CPU; the
conversion is not timed), and the throughput ratio llama.cpp / transformers, with how many prompt
tokens llama.cpp read from its prefix cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"  # a throw-away token for the loopback server of this run


def policy_llm(kind: str):
    from transformers import AutoTokenizer

    from toolorchestra.core.settings import Settings
    from toolorchestra.llm.local import LocalLLM
    from toolorchestra.llm.smollm2 import ensure_converted

    folder = ensure_converted(Settings(workspace=REPO).models_cache)
    if kind == "smollm2":
        return LocalLLM(folder, name="smollm2-135m-instruct", device="cpu")
    sys.path.insert(0, str(REPO / "tests"))  # a benchmark script borrows the tests' tiny model builder
    from helpers.tiny_models import tiny_llama

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return LocalLLM.from_model(tiny_llama(tokenizer), tokenizer, name="tiny-llama")


def served_model(llm, settings):
    from toolorchestra.registry.policy import RegisteredModel, system_prompt
    from toolorchestra.serving.models import ServedModel
    from toolorchestra.tools.catalog import Price, parse_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    catalog = parse_catalog({"tools": [{"name": "code_interpreter", "kind": "code", "description": "Run Python.",
                                        "backend": {"type": "code_interpreter", "wall_time_s": 10},
                                        "price": {"per_call": 0.0001}}]}, source="<bench catalog>")
    registered = RegisteredModel(llm=llm, catalog=catalog, manifest={}, name="orchestrator", version="1",
                                 run_id=None, price=Price(input_per_mtok=0.5, output_per_mtok=1.5))
    return ServedModel(registered=registered, toolbox=build_toolbox(catalog, settings),
                       system_prompt=system_prompt(catalog, {}), max_turns=2, max_tokens=16)


async def fire(url: str, requests: int, max_tokens: int) -> tuple[list[float], float]:
    import openai

    api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0, timeout=600)

    async def one(i: int) -> float:
        started = time.perf_counter()
        reply = await api.chat.completions.create(
            model="orchestrator", max_tokens=max_tokens,
            messages=[{"role": "user", "content": f"What is {i} * 7? Answer with the number."}])
        extra = reply.model_extra["orchestra"]
        assert reply.choices[0].message.role == "assistant" and reply.model == "orchestrator/1"
        assert reply.usage.prompt_tokens > 0 and extra["cost_usd"] > 0 and extra["trajectory"]["turns"]
        assert extra["stop_reason"] in {"final_message", "answer_tool", "max_turns"}, extra["stop_reason"]
        return time.perf_counter() - started

    started = time.perf_counter()
    latencies = await asyncio.gather(*(one(i) for i in range(requests)))
    await api.close()
    return list(latencies), time.perf_counter() - started


def batch_totals(metrics) -> tuple[float, float]:
    """(batches run, episodes in them) so far, from the server's Prometheus histogram."""
    samples = metrics.batch.collect()[0].samples
    return (next(s.value for s in samples if s.name.endswith("_count")),
            next(s.value for s in samples if s.name.endswith("_sum")))


def measure(llm, settings, *, requests: int, max_batch: int, max_tokens: int) -> dict[str, float]:
    from toolorchestra.serving.app import create_app
    from toolorchestra.serving.config import ServeConfig
    from toolorchestra.serving.metrics import ServeMetrics
    from toolorchestra.serving.models import ModelPool
    from toolorchestra.serving.server import BackgroundServer

    served = served_model(llm, settings)
    config = ServeConfig(token=TOKEN, max_batch=max_batch, batch_window_ms=10, max_queue=max(requests, 1),
                         request_timeout_s=3600)  # a load test measures latency, it does not time out
    metrics = ServeMetrics()
    pool = ModelPool(config, settings, loader=lambda ref: served, on_batch=metrics.on_batch)
    pool.get("")
    with BackgroundServer(create_app(config, pool, metrics=metrics)) as url:
        asyncio.run(fire(url, 2, max_tokens))  # warm-up (first generation, code paths)
        count0, total0 = batch_totals(metrics)
        latencies, wall = asyncio.run(fire(url, requests, max_tokens))
        count, total = (a - b for a, b in zip(batch_totals(metrics), (count0, total0), strict=True))
    quantiles = statistics.quantiles(latencies, n=20)
    return {"requests": requests, "max_batch": max_batch, "p50_s": statistics.median(latencies),
            "p95_s": quantiles[18], "requests_per_s": requests / wall, "wall_s": wall,
            "mean_batch": total / count if count else 0.0,
            "prompt_tokens_encoded": getattr(llm, "prompt_tokens_encoded", None)}


def compare_engines(llm, settings, args) -> None:
    """The micro-batched server on transformers, then on llama.cpp (same weights, same requests)."""
    from toolorchestra.llm.config import as_engine

    rows = {"transformers": measure(llm, settings, requests=args.requests, max_batch=args.max_batch,
                                    max_tokens=args.max_tokens)}
    rows["llamacpp"] = measure(as_engine(llm, "llamacpp", settings), settings, requests=args.requests,
                               max_batch=args.max_batch, max_tokens=args.max_tokens)
    ratio = rows["llamacpp"]["requests_per_s"] / rows["transformers"]["requests_per_s"]
    for name, row in rows.items():
        print(f"{name:>13}: {row['requests']} concurrent requests, p50 {row['p50_s']:.2f}s, p95 {row['p95_s']:.2f}s, "
              f"{row['requests_per_s']:.3f} req/s, mean batch {row['mean_batch']:.1f}")
    print(f"throughput ratio llama.cpp / transformers: {ratio:.2f}x  (policy {args.policy}, every response checked; "
          f"llama.cpp decoded {rows['llamacpp']['prompt_tokens_encoded']} prompt tokens itself, the rest from its cache)")
    if args.json:
        print(json.dumps({"policy": args.policy, "engines": rows, "engine_ratio": ratio}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--policy", choices=["tiny", "smollm2"], default="tiny")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per policy turn")
    parser.add_argument("--compare-engines", action="store_true",
                        help="micro-batched server on transformers vs llama.cpp (instead of batched vs one at a time)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import tempfile

    from toolorchestra.core.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(workspace=Path(tmp), state_dir=Path(tmp) / ".orchestra")
        llm = policy_llm(args.policy)
        if args.compare_engines:
            compare_engines(llm, settings, args)
            return
        batched = measure(llm, settings, requests=args.requests, max_batch=args.max_batch, max_tokens=args.max_tokens)
        single = measure(llm, settings, requests=args.requests, max_batch=1, max_tokens=args.max_tokens)
    ratio = batched["requests_per_s"] / single["requests_per_s"]
    for name, row in (("micro-batched", batched), ("one at a time", single)):
        print(f"{name:>14}: {row['requests']} concurrent requests, p50 {row['p50_s']:.2f}s, p95 {row['p95_s']:.2f}s, "
              f"{row['requests_per_s']:.2f} req/s, mean batch {row['mean_batch']:.1f} (max_batch {row['max_batch']})")
    print(f"throughput ratio batched / one at a time: {ratio:.2f}x  (policy {args.policy}, every response checked)")
    if args.json:
        print(json.dumps({"policy": args.policy, "batched": batched, "one_at_a_time": single,
                          "throughput_ratio": ratio}))


if __name__ == "__main__":
    main()
