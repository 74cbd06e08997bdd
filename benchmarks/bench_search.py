"""Benchmark the local-search tool: index build, cache reload and query latency.

Generates a deterministic synthetic corpus (sentences drawn from a fixed vocabulary), indexes it
with the embedder the arguments name (default: the bundled all-MiniLM-L6-v2 on CPU), then
reloads it from the cache and times the same queries twice: hybrid (the tool's default: faiss
and BM25, scores fused) and dense only (`lexical: false`). Prints one line per figure; with `--json`
the last line is one JSON object with them.

    .venv/bin/python benchmarks/bench_search.py --docs 200 --queries 50 [--json]
    .venv/bin/python benchmarks/bench_search.py --device cuda --docs 5000
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from toolorchestra.tools.embeddings import LocalEmbedder, LocalEmbedderConfig
from toolorchestra.tools.local_search import ChunkingConfig, LocalSearch

WORDS = (
    "river mountain engine protein orbit harbour violin glacier census theorem bacteria senate "
    "copper festival algorithm lagoon pottery enzyme cathedral satellite monsoon tariff opera "
    "volcano alloy parliament reef pigment telescope vaccine canal dynasty magnet wheat novel"
).split()


def make_corpus(root: Path, n_docs: int, words_per_doc: int, seed: int) -> None:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n_docs):
        sentences = []
        for _ in range(words_per_doc // 10):
            sentences.append(" ".join(rng.choice(WORDS) for _ in range(10)).capitalize() + ".")
        (root / f"doc_{i:05d}.txt").write_text(" ".join(sentences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--words-per-doc", type=int, default=300)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--chunk-chars", type=int, default=800)
    parser.add_argument("--chunk-overlap", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        docs, cache = Path(tmp) / "docs", Path(tmp) / "cache"
        make_corpus(docs, args.docs, args.words_per_doc, args.seed)
        chunking = ChunkingConfig(chunk_chars=args.chunk_chars, chunk_overlap=args.chunk_overlap)
        embedder = LocalEmbedder(LocalEmbedderConfig(device=args.device, batch_size=args.batch_size))

        t0 = time.perf_counter()
        embedder.embed(["warm up"])  # model load, reported separately from indexing
        load_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        tool = LocalSearch.from_folder(docs, embedder=embedder, cache_dir=cache, chunking=chunking)
        build_s = time.perf_counter() - t0
        n_chunks = len(tool.index.chunks)

        before = embedder.texts_embedded
        t0 = time.perf_counter()
        reloaded = LocalSearch.from_folder(docs, embedder=embedder, cache_dir=cache, chunking=chunking)
        reload_s = time.perf_counter() - t0
        assert not reloaded.index.built and embedder.texts_embedded == before

        rng = random.Random(args.seed + 1)
        queries = [" ".join(rng.choice(WORDS) for _ in range(6)) for _ in range(args.queries)]
        dense = copy.copy(reloaded)
        dense.lexical = False
        latencies: dict[str, list[float]] = {"hybrid": [], "dense": []}
        for query in queries:
            for name, tool_view in (("hybrid", reloaded), ("dense", dense)):
                t0 = time.perf_counter()
                tool_view.run({"query": query, "top_k": 5})
                latencies[name].append((time.perf_counter() - t0) * 1000)

    def p95(values: list[float]) -> float:
        return statistics.quantiles(values, n=20)[-1] if len(values) > 1 else values[0]

    figures = {"benchmark": "search", "docs": args.docs, "chunks": n_chunks, "model_load_s": round(load_s, 3),
               "index_build_s": round(build_s, 3), "cache_reload_ms": round(reload_s * 1000, 1)}
    for name, values in latencies.items():
        figures[f"query_p50_ms_{name}"] = round(statistics.median(values), 2)
        figures[f"query_p95_ms_{name}"] = round(p95(values), 2)
    print(f"corpus: {args.docs} docs, {n_chunks} chunks ({args.chunk_chars} chars, {args.chunk_overlap} overlap)")
    print(f"model load: {load_s:.2f} s on {args.device}")
    print(f"index build: {build_s:.2f} s ({n_chunks / build_s:.0f} chunks/s, embedding + faiss + cache write)")
    print(f"cache reload: {reload_s * 1000:.0f} ms (no embedding; BM25 is built at the first hybrid query)")
    for name, values in latencies.items():
        print(f"query latency, {name}: p50 {statistics.median(values):.1f} ms, p95 {p95(values):.1f} ms "
              f"over {len(values)} queries")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
