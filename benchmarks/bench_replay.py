"""Benchmark golden replay: copy-on-write state + incremental hash vs deep copy per task.

Synthesizes tasks on a domain (default: the vendored ToolScale bank database,
`third_party/toolscale/bank`, 1.6 MB), then replays every task's golden actions from a fresh state
and hashes the result, two ways:
- **fast** (what the project uses): a fresh `DbState` is an empty overlay on the shared base, a
  write copies only the record it touches, and the hash is updated from per-record digests;
- **baseline**: `copy.deepcopy` of the database per task, the same engine on that copy, and a full
  hash of every record.
Both must give the same hash for every task (checked). Prints replays/s of each and the ratio.

    .venv/bin/python benchmarks/bench_replay.py
    .venv/bin/python benchmarks/bench_replay.py --domain path/to/domain --tasks 300 --seconds 3
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

from toolorchestra.envs.domain import load_domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.state import BaseDb, DbState
from toolorchestra.synthesis.procedural import synthesize_tasks

# The vendored ToolScale bank database (see third_party/README.md).
BANK = Path(__file__).resolve().parents[1] / "third_party" / "toolscale" / "bank"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", type=Path, default=BANK)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=2.0, help="minimum timed duration of the fast loop")
    parser.add_argument("--baseline-tasks", type=int, default=40)
    args = parser.parse_args()

    domain = load_domain(args.domain)
    specs = domain.tool_specs()
    engine = Engine(specs, domain.layouts)
    tasks, _ = synthesize_tasks(domain, args.tasks, seed=args.seed, specs=specs)
    actions = [[(a.name, a.arguments) for a in t.actions] for t in tasks]
    n_actions = sum(map(len, actions))
    print(f"domain: {domain.name}; tasks: {len(tasks)}; golden actions: {n_actions} "
          f"({n_actions / len(tasks):.1f} per task, {sum(1 for t in tasks for a in t.actions if a.name.split('_')[0] not in ('get', 'find', 'search', 'list')) } writes)")

    t0 = time.perf_counter()
    base = BaseDb(domain.db, domain.layouts)
    base.total()  # one-time: digest every record of the shared base
    setup = time.perf_counter() - t0
    print(f"one-time base setup (record digests): {setup * 1000:.1f} ms")

    def fast(calls: list) -> str:
        state = DbState(base)
        for name, arguments in calls:
            engine.call(state, name, arguments)
        return state.hash()

    def baseline(calls: list) -> str:
        fresh = copy.deepcopy(domain.db)
        state = DbState(BaseDb(fresh, domain.layouts))
        for name, arguments in calls:
            engine.call(state, name, arguments)
        return state.hash()  # digests every record of the copy: a full hash

    expected = [fast(c) for c in actions]
    sample = actions[: args.baseline_tasks]
    t0 = time.perf_counter()
    got = [baseline(c) for c in sample]
    base_rate = len(sample) / (time.perf_counter() - t0)
    assert got == expected[: len(sample)], "baseline and fast replay disagree on a database hash"

    done, t0 = 0, time.perf_counter()
    while True:
        for calls in actions:
            fast(calls)
        done += len(actions)
        elapsed = time.perf_counter() - t0
        if elapsed >= args.seconds:
            break
    fast_rate = done / elapsed
    print(f"baseline (deepcopy per task + full hash): {base_rate:,.1f} replays/s over {len(sample)} tasks")
    print(f"fast (copy-on-write + incremental hash):  {fast_rate:,.1f} replays/s over {done} replays")
    print(f"speed-up: {fast_rate / base_rate:,.0f}x (target >= 10x); "
          f"fast >= 1,000 replays/s: {'yes' if fast_rate >= 1000 else 'NO'}")


if __name__ == "__main__":
    main()
