"""Evaluation throughput: episodes per second of the evaluate stage's runner.

    python benchmarks/bench_eval.py [--compare engines|scheduling|final-answer-line|modes] [--tasks 8] [--max-turns 2] [--max-tokens 48]
                                    [--max-policy-chars 1200] [--batch-size 16] [--workers 2]
                                    [--weights f16] [--n-ctx 16384] [--device auto] [--expert local|instant]
                                    [--expert-latency 0.0] [--model FOLDER] [--torch-threads N] [--json]

`--compare engines` (the default) runs the evaluate stage's method set (the SmolLM2 orchestrator,
each expert alone, the random router, always-strongest and the cascade, over the embedded catalog
without the web search) on the same task list twice, the stage's way (episodes in lockstep batches
of `--batch-size`, tool calls in a thread pool, greedy):

- **old**: every local model on the transformers engine, one method at a time (as the stage ran
  when the generation issue was filed: a transformers forward already uses every core);
- **new**: the same models on the llama.cpp engine (`engine: llamacpp`; the GGUF converted from the
  same transformers folder at `--weights`, cached, before timing) with the stage's `--workers`
  method workers, each with its own engines (`catalog_llms(..., replica=k)`: one core each);

and prints episodes/s for each (and seconds per method), the speed-up, and the outcomes (greedy:
correct, tool calls per episode) that differ between engines. Both schedule episodes as the stage
does (`scheduling: auto`: the orchestrator and the expert alone in lockstep turns, the routers one
thread per episode).

`--compare scheduling` runs the new path twice, on fresh engines each time: **old** with every
method's episodes in lockstep turns (`scheduling: lockstep`), **new** with each episode in its own
thread (`per_episode`; llama.cpp merges their calls into its running batch). With `--json` the last line is one
JSON object with `episodes_per_s_old`, `episodes_per_s_new`, `speedup`, `outcomes_identical`,
`outcome_differences`.

`--compare final-answer-line` runs the new path twice with one difference: **old** without the code
interpreter's shortcut (a program's one printed value comes back to the policy, which answers on
its next turn), **new** with it (that value ends the task; the embedded catalog's setting). It
only shows with a policy that writes programs: pass a trained checkpoint (`--model
models/orchestrator`); the prompted base model rarely calls the code interpreter.

`--compare modes` is the older comparison on the transformers engine, serial vs concurrent:

The evaluation runner (`toolorchestra.evaluation.runner.evaluate`) runs two methods on held-out
tasks of a freshly synthesized `library` domain (half QA, half tool use) with the embedded
catalog's experts (SmolLM2) and basic tools:

- the prompted SmolLM2 orchestrator (or the model folder given): dominated by policy generation;
- the random router: no policy model, every turn an expert call, so it measures tool/LLM-call
  concurrency;

each twice:

- **serial**: one episode at a time (`batch_size=1`) and one tool call at a time (`max_workers=1`);
- **concurrent**: all episodes in lockstep, one batched `generate` per turn, and the tool calls of
  a turn in a thread pool (`max_workers=8`).

It prints tasks/s for each, the speed-up, and whether both modes produced the same outcomes
(greedy decoding). `--expert-latency S` makes every expert call also wait S seconds, as a remote
endpoint would; a local expert model serialises its calls behind one lock, so the thread pool only
pays off for remote experts (and tools).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import get_args

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from toolorchestra.llm.base import LLM, Completion


class RemoteLike(LLM):
    """A local model that also waits like a network call (the wait happens outside its lock)."""

    def __init__(self, inner: LLM, latency_s: float) -> None:
        self.inner, self.latency_s, self.model = inner, latency_s, inner.model

    def chat(self, messages, **kwargs) -> Completion:
        time.sleep(self.latency_s)
        reply = self.inner.chat(messages, **kwargs)
        return reply.model_copy(update={"latency_s": reply.latency_s + self.latency_s})


class Instant(LLM):
    """An expert that replies at once (isolates the cost of waiting from local compute)."""

    model = "instant"

    def chat(self, messages, **kwargs) -> Completion:
        from toolorchestra.llm.base import Usage

        return Completion(text="42", usage=Usage(prompt_tokens=200, completion_tokens=2), model=self.model)


def parse_common(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Add `--torch-threads` and `--json` (shared with bench_describe.py), parse, apply the threads."""
    parser.add_argument("--torch-threads", type=int, default=None,
                        help="transformers threads (default: torch's; 1 avoids thread stalls on a loaded machine)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    return args


def synthesize(root: Path, tasks: int) -> Path:
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.synthesis.procedural import ProceduralConfig

    domain = load_embedded("library", seed=0, size=20)
    easy = ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0)
    result = synthesize_domain(domain, tasks=max(4, tasks), seed=0, qa=max(4, tasks), evolve_fraction=0.0, config=easy)
    write_domain_folder(root / "toolscale" / "library", result, qa_file=root / "qa" / "library.jsonl",
                        docs_file=root / "qa" / "docs" / "library.jsonl")
    return root


def outcomes(run) -> dict[tuple, tuple]:
    """Each episode's judgement: (method, task key) -> (correct, tool calls)."""
    return {(r.method, r.key): (r.correct, tuple(sorted(r.tool_calls.items()))) for r in run.records}


def stage_methods(catalog, policy, llm_for, max_turns: int) -> list:
    """The evaluate stage's method set for one policy: the orchestrator, each expert alone, the random
    router, always-strongest and the cascade (`evaluation.methods`)."""
    from toolorchestra.evaluation import methods as m

    return [m.orchestrator("prompted", policy, policy_alias="smollm2"), *m.expert_methods(catalog, llm_for),
            m.random_router(catalog, seed=0, max_turns=max_turns), m.always_strongest(catalog),
            m.cascade(catalog, max_turns=max_turns)]


def compare_engines(args, settings, catalog, benches, n: int, *, compare: str = "engines") -> dict:
    """Old vs new path (see the module docstring): engines; `scheduling`: the new path's lockstep vs
    per-episode scheduling; `final-answer-line`: the new path without and with the program shortcut."""
    from toolorchestra.episodes.environment import EpisodeConfig
    from toolorchestra.evaluation.runner import EvalConfig, PromptConfig, evaluate
    from toolorchestra.llm.config import LlamaCppLLMConfig, LocalLLMConfig, build_llm

    model = args.model or "smollm2-135m-instruct"
    # old: the transformers engine, one method at a time (its forward already uses every core);
    # new: llama.cpp with the stage's method workers, each with its own engines (one core each).
    llamacpp = LlamaCppLLMConfig(model=model, weights=args.weights, n_ctx=args.n_ctx)
    catalogs = {"old": catalog, "new": catalog}
    if compare == "scheduling":
        engines = {"old": (llamacpp, args.workers, "lockstep"), "new": (llamacpp, args.workers, "per_episode")}
    elif compare == "final-answer-line":
        engines = {"old": (llamacpp, args.workers, "auto"), "new": (llamacpp, args.workers, "auto")}
        catalogs = {"old": catalog.with_final_answer_line(False), "new": catalog.with_final_answer_line(True)}
    else:
        engines = {"old": (LocalLLMConfig(model=model, device=args.device), 1, "auto"),
                   "new": (llamacpp, args.workers, "auto")}
    prompt = PromptConfig(max_policy_chars=args.max_policy_chars)
    results = {}
    for label, (engine, workers, schedule) in engines.items():
        catalog = catalogs[label]

        def worker_models(k: int, engine=engine):
            expert = build_llm(engine, settings, replica=k) if args.expert == "local" else Instant()
            return lambda alias: expert

        # The policy under evaluation has its own engine, as a trained checkpoint has in the stage
        # (llama.cpp: the GGUF is converted here, once, outside the timing).
        policy = build_llm(engine, settings, replica=workers)
        methods = stage_methods(catalog, policy, worker_models(0), args.max_turns)
        config = EvalConfig(episode=EpisodeConfig(max_turns=args.max_turns, max_tokens=args.max_tokens, max_workers=8),
                            batch_size=args.batch_size, prompt=prompt, method_workers=workers, scheduling=schedule)
        evaluate(methods[:1], benches[:1], catalog=catalog, settings=settings, llm_for=worker_models(0),  # warm-up
                 config=EvalConfig(episode=EpisodeConfig(max_turns=1, max_tokens=8), batch_size=n, prompt=prompt))
        started = time.perf_counter()
        run = evaluate(methods, benches, catalog=catalog, settings=settings, config=config,
                       llm_for=worker_models(0), llm_for_worker=worker_models)
        seconds = time.perf_counter() - started
        episodes = len(run.records)
        results[label] = {"seconds": seconds, "episodes": episodes, "outcomes": outcomes(run),
                          "accuracy": {k: v["overall"].accuracy for k, v in run.summary.items()},
                          "method_seconds": run.seconds}
        per_method = ", ".join(f"{k} {v:.1f}s" for k, v in run.seconds.items())
        print(f"{label} ({engine.kind}, {workers} method worker(s), scheduling {schedule}): {episodes} episodes in {seconds:6.1f}s = "
              f"{episodes / seconds:.3f} episodes/s ({per_method})", flush=True)
        print(f"  accuracy {results[label]['accuracy']}", flush=True)
    old, new = results["old"], results["new"]
    differences = [{"method": k[0], "task": k[1], "old": list(old["outcomes"].get(k, ())),
                    "new": list(new["outcomes"].get(k, ()))}
                   for k in sorted(set(old["outcomes"]) | set(new["outcomes"]))
                   if old["outcomes"].get(k) != new["outcomes"].get(k)]
    speedup = old["seconds"] / new["seconds"] * new["episodes"] / old["episodes"]
    print(f"speed-up new / old: x{speedup:.2f}; outcomes identical: {not differences} "
          f"({len(differences)} of {len(old['outcomes'])} differ)")
    for d in differences:
        print(f"  differs: {d}")
    import torch

    from toolorchestra.llm.llamacpp import built_features

    return {"benchmark": "eval", "compare": compare,
            "old": {"engine": engines["old"][0].kind, "scheduling": engines["old"][2]},
            "new": {"engine": engines["new"][0].kind, "scheduling": engines["new"][2]}, "tasks": n, "torch_threads": torch.get_num_threads(), "llamacpp_kernels": built_features(),
            "episodes": old["episodes"], "methods": sorted(old["accuracy"]), "max_turns": args.max_turns,
            "max_tokens": args.max_tokens, "weights": args.weights, "n_ctx": args.n_ctx, "workers_new": args.workers,
            "batch_size": args.batch_size, "episodes_per_s_old": old["episodes"] / old["seconds"],
            "episodes_per_s_new": new["episodes"] / new["seconds"], "speedup": speedup,
            "outcomes_identical": not differences, "outcome_differences": differences,
            "accuracy_old": old["accuracy"], "accuracy_new": new["accuracy"],
            "method_seconds_old": old["method_seconds"], "method_seconds_new": new["method_seconds"]}


def compare_modes(args, settings, catalog, benches, n: int) -> dict:
    from toolorchestra.episodes.environment import EpisodeConfig
    from toolorchestra.evaluation import methods as m
    from toolorchestra.evaluation.runner import EvalConfig, PromptConfig, evaluate
    from toolorchestra.llm.config import LocalLLMConfig, build_llm

    policy = build_llm(LocalLLMConfig(model=args.model or "smollm2-135m-instruct", device=args.device), settings)
    base_expert = policy if args.expert == "local" else Instant()
    expert = base_expert if args.expert_latency <= 0 else RemoteLike(base_expert, args.expert_latency)
    methods = [m.orchestrator("prompted", policy, policy_alias="smollm2"),
               m.random_router(catalog, seed=0, max_turns=args.max_turns)]
    prompt = PromptConfig(max_policy_chars=600)
    evaluate(methods[:1], benches[:1], catalog=catalog, settings=settings, llm_for=lambda a: expert,  # warm-up
             config=EvalConfig(episode=EpisodeConfig(max_turns=1, max_tokens=8), batch_size=n, prompt=prompt))
    figures = {}
    for method in methods:
        results = {}
        for mode, batch, workers in (("serial", 1, 1), ("concurrent", n, 8)):
            config = EvalConfig(episode=EpisodeConfig(max_turns=args.max_turns, max_tokens=args.max_tokens,
                                                      max_workers=workers), batch_size=batch, prompt=prompt)
            started = time.perf_counter()
            run = evaluate([method], benches, catalog=catalog, settings=settings, config=config,
                           llm_for=lambda a: expert)
            seconds = time.perf_counter() - started
            turns = sum(r.turns for r in run.records)
            calls = sum(sum(r.tool_calls.values()) for r in run.records)
            results[mode] = (seconds, sorted((r.key, r.correct, tuple(sorted(r.tool_calls.items())))
                                             for r in run.records))
            print(f"{method.name:>13} {mode:>10}: {n} tasks in {seconds:6.1f}s = {n / seconds:.3f} tasks/s "
                  f"({turns} turns, {calls} tool calls, accuracy "
                  f"{run.summary[method.name]['overall'].accuracy:.2f})")
        speedup = results["serial"][0] / results["concurrent"][0]
        same = results["serial"][1] == results["concurrent"][1]
        print(f"{method.name:>13} speed-up concurrent / serial: x{speedup:.2f}; same outcomes: {same}")
        figures[method.name] = {"tasks_per_s_serial": n / results["serial"][0],
                                "tasks_per_s_concurrent": n / results["concurrent"][0], "speedup": speedup,
                                "outcomes_identical": same}
    return {"benchmark": "eval_modes", "tasks": n, **figures}


def main() -> None:
    from toolorchestra.llm.gguf_export import GGUFWeights
    from toolorchestra.llm.llamacpp import N_CTX

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compare", choices=["engines", "scheduling", "final-answer-line", "modes"],
                        default="engines")
    parser.add_argument("--tasks", type=int, default=8, help="tasks (half QA, half tool use)")
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--max-policy-chars", type=int, default=1200, help="domain policy in the prompt (the stage's)")
    parser.add_argument("--batch-size", type=int, default=16, help="episodes in lockstep (the stage's)")
    parser.add_argument("--workers", type=int, default=2,
                        help="method workers of the new path, each with its own llama.cpp engines (the stage's)")
    parser.add_argument("--weights", choices=get_args(GGUFWeights), default="f16",
                        help="GGUF precision of the llama.cpp engine (engines comparison)")
    parser.add_argument("--n-ctx", type=int, default=N_CTX,
                        help="KV cells of each llama.cpp engine (the stage's engine setting)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--expert-latency", type=float, default=0.0, help="seconds each expert call also waits")
    parser.add_argument("--model", default=None, help="policy model folder (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--expert", choices=["local", "instant"], default="local",
                        help="the answer expert: the local model, or an instant reply (with --expert-latency: a "
                             "remote endpoint's wait without local compute)")
    args = parse_common(parser)

    import torch

    from toolorchestra.core.settings import Settings, find_workspace
    from toolorchestra.evaluation.benchmarks import QASpec, ToolScaleSpec, build_benchmarks
    from toolorchestra.tools.catalog import load_embedded_catalog

    repo = find_workspace(Path(__file__).resolve().parent)
    settings = Settings(workspace=repo)  # the repo's model cache: SmolLM2 is converted once
    # The stage's catalog but the web search, which needs a key and the network.
    full = load_embedded_catalog()
    catalog = full.subset([t.name for t in full.tools if t.name != "web_search"])
    with tempfile.TemporaryDirectory() as tmp:
        root = synthesize(Path(tmp), args.tasks)
        half = args.tasks // 2
        benches = build_benchmarks([ToolScaleSpec(name="toolscale", max_tasks=args.tasks - half),
                                    QASpec(name="qa", max_tasks=half)],
                                   tasks_root=root, workspace=root, seed=0, train_ids=set())
        n = sum(len(b.items) for b in benches)
        cpu = platform.processor() or platform.machine()
        print(f"torch threads: {torch.get_num_threads()}, {cpu}, load average {os.getloadavg()[0]:.1f}")
        print(f"{n} tasks ({', '.join(f'{b.name}: {len(b.items)}' for b in benches)}), max_turns={args.max_turns}, "
              f"max_tokens={args.max_tokens}, expert {args.expert} + {args.expert_latency}s latency")
        if args.compare == "modes":
            figures = compare_modes(args, settings, catalog, benches, n)
        else:
            figures = compare_engines(args, settings, catalog, benches, n, compare=args.compare)
    if args.json:
        print(json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
