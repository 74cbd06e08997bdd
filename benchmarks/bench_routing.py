"""Where a checkpoint sends held-out QA items: its first call per QA category, in minutes, not a demo.

    python benchmarks/bench_routing.py [--model models/warm_start] [--items 64] [--tickets 32] [--json]
    python benchmarks/bench_routing.py --train [--template FILE] [--out .orchestra/bench_routing]

Reads the flow's data (run `orchestra run`, or the stages up to `preferences`, first): the held-out
QA instances of `data/datasets` (`--items` of them, seeded), each rendered as the evaluation renders
its first policy turn (the instance's system prompt, price sheet and offered tools, through the
checkpoint's chat template) and answered greedily on llama.cpp (`--max-tokens`). It tabulates the
called tool by QA category and by whether the item offers both basic tools, and prints the share of
calculations and lookups whose first call is the tool their category needs
(`episodes.environment.CATEGORY_TOOLS`). A first call to a basic tool (`code_interpreter`,
`local_search`) is also run through the item's episode tools, and the table counts the results that
show the item's answer (a program that prints it; a passage that holds it, which the policy must
still read off): where a call goes is not yet whether it helps.

Held-out tickets (tool-use tasks of at most `train.data.max_actions` golden calls, as the
evaluation's toolscale benchmarks hold them; `--tickets` of them) get the same first turn: the
table counts first calls to one of the task's golden tools and, of those, calls whose arguments the
tool accepts (run against the task's fresh database). On 2026-12-05 every ticket of the demo failed
on its first call, the right tool with local search's `query` argument.

`--train` first runs the train stage's SFT warm start (`rl.train.warm_start`, `params.yaml`'s
`train` section, on the train split) from the base model, optionally with another chat template
(`--template`, a Jinja file: how a listing change would train), and probes that checkpoint: about
5 min of SFT and 3-5 min of probing on 2 cores.

Why it exists: on 2026-12-02 a warm start trained with signature-line tool listings sent 17 of 19
held-out lookups that offered both basic tools to `code_interpreter`; three 40-minute demos had
shown the collapse before this probe found its cause in 10 minutes (docs/design.md). With `--json`
the last line is one JSON object with the counts and shares.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]


def train_inputs(settings: Any) -> tuple[Any, Any, list[Any], Any, list[Any]]:
    """(train config, catalog, training instances, domain locator, first-call pool) as the train
    stage reads them."""
    from pipelines.train import Params, load_inputs, train_config
    from toolorchestra.core.yaml_strict import strict_load
    from toolorchestra.rl.train import first_call_pool, select_instances

    raw = strict_load((settings.workspace / "params.yaml").read_text())
    params = Params.model_validate({**raw["train"], "seed": raw.get("base", {}).get("seed", 0)})
    config = train_config(params)
    deps = {name: settings.workspace / path for name, path in raw["train"]["deps"].items()}
    catalog, instances, domains, _ = load_inputs(config, deps)
    return config, catalog, select_instances(config, instances), domains, first_call_pool(config, instances)


def first_calls(model_dir: Path, env: Any, items: list[Any], settings: Any, max_tokens: int) -> list[tuple[str, bool]]:
    """Each item's first policy turn, greedy on llama.cpp: the tool it calls ("(no call)",
    "(malformed)") and, for a QA item, whether running that call through the episode's tools returns
    a result that shows the item's answer (a program that prints it, a passage that holds it); for a
    ticket, whether the domain tool it calls accepts its arguments."""
    from toolorchestra.episodes.environment import CODE_TOOL, QA_BASIC_TOOLS, printed_answer
    from toolorchestra.episodes.judge import contains_answer, judge_answer
    from toolorchestra.llm.hermes import MalformedToolCall, parse_tool_call
    from toolorchestra.llm.llamacpp import LlamaCppLLM
    from toolorchestra.llm.local import LocalLLM
    from toolorchestra.tools.experts import EpisodeContext

    llm = LlamaCppLLM.from_local(LocalLLM(model_dir, device="cpu"), settings.workspace / ".orchestra" / "models" / "gguf")
    setups = [env.setup(item) for item in items]  # each item's episode: its offered tools, then its first call
    try:
        replies = llm.chat_batch([[dict(m) for m in item.prompt] for item in items],
                                 tools_per_row=[setup.specs for setup in setups], max_tokens=max_tokens)
    finally:
        llm.close()
    called = []
    for item, setup, reply in zip(items, setups, replies, strict=True):
        try:
            call = parse_tool_call(reply.text)
        except MalformedToolCall:
            called.append(("(malformed)", False))
            continue
        if call is None:
            called.append(("(no call)", False))
            continue
        # Only the basic tools and a ticket's domain tools: an expert call would spend minutes of
        # generation on a probe.
        shows = False
        if item.kind == "tool_use":  # a ticket: does its domain tool accept the arguments?
            if call.name in set(item.required_tools):
                shows = setup.toolbox.call(call.name, call.arguments, EpisodeContext(task=item.question)).ok
        elif call.name in QA_BASIC_TOOLS:
            result = setup.toolbox.call(call.name, call.arguments, EpisodeContext(task=item.question))
            # a program shows it as its last printed line (as the golden reply reads it), a passage anywhere
            shows = (judge_answer(printed_answer(result.observation), item.answer) if call.name == CODE_TOOL
                     else contains_answer(result.observation, item.answer))
        called.append((call.name, shows))
    return called


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="checkpoint folder (default: models/warm_start)")
    parser.add_argument("--train", action="store_true", help="train a warm start first (params.yaml's train.sft)")
    parser.add_argument("--template", type=Path, default=None, help="chat template (Jinja) for --train")
    parser.add_argument("--out", type=Path, default=None, help="where --train writes (default .orchestra/bench_routing)")
    parser.add_argument("--items", type=int, default=64, help="held-out QA items probed")
    parser.add_argument("--tickets", type=int, default=32, help="held-out tickets probed (0: none)")
    parser.add_argument("--max-tokens", type=int, default=None,
                        help="tokens per first turn (default: the train stage's episode.max_tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()
    if args.items < 1 or args.tickets < 0:
        raise SystemExit("bench_routing: --items must be at least 1 and --tickets at least 0")
    if args.template is not None and not args.train:
        raise SystemExit("bench_routing: --template only applies with --train")

    from toolorchestra.core.settings import Settings, find_workspace
    from toolorchestra.episodes.environment import CATEGORY_TOOLS, QA_BASIC_TOOLS, RolloutEnvironment
    from toolorchestra.episodes.pool import QAItem, qa_category
    from toolorchestra.episodes.rows import load_instances
    from toolorchestra.llm.config import catalog_llms
    from toolorchestra.rl.train import fits_episode

    settings = Settings(workspace=find_workspace(REPO))
    try:
        config, catalog, train_items, domains, long_tasks = train_inputs(settings)
        held_out = load_instances(settings.workspace / "data" / "datasets", split="eval")
        held = [i for i in held_out if i.kind == "qa"]
        tickets = [i for i in held_out if i.kind == "tool_use" and fits_episode(config, i)]
    except Exception as exc:  # missing or broken flow data: one line, no traceback
        raise SystemExit(f"bench_routing: {exc} (run the flow up to the preferences stage first)") from None
    if not held:
        raise SystemExit("bench_routing: the eval split has no QA instance")
    env = RolloutEnvironment(catalog, settings, domains, config.episode,
                             llm_for=catalog_llms(catalog.models, "llamacpp", settings))
    model_dir = args.model or settings.workspace / "models" / "warm_start"
    sft_seconds = None
    if args.train:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        logging.basicConfig(format="%(message)s")
        logging.getLogger("toolorchestra.rl.sft").setLevel(logging.INFO)  # the warm start's mix

        from toolorchestra.rl.train import resolve_model_folder, use_bf16, warm_start

        work = args.out or settings.workspace / ".orchestra" / "bench_routing"
        base = resolve_model_folder(config.base_model, settings)
        start = base
        if args.template is not None:  # the base model with another chat template
            start = work / "base"
            tokenizer = AutoTokenizer.from_pretrained(base)
            tokenizer.chat_template = args.template.read_text()
            AutoModelForCausalLM.from_pretrained(base).save_pretrained(start)
            tokenizer.save_pretrained(start)
        began = time.perf_counter()
        model_dir, _ = warm_start(config, env, train_items, start, work, use_cpu=True, bf16=use_bf16(config, "cpu"),
                                  first_calls_from=long_tasks)
        sft_seconds = time.perf_counter() - began
    if not (Path(model_dir) / "config.json").is_file():
        raise SystemExit(f"bench_routing: {model_dir} is not a checkpoint folder (run the train stage, or --train)")

    random.Random(args.seed).shuffle(held)
    random.Random(args.seed).shuffle(tickets)
    items, tickets = held[:args.items], tickets[:args.tickets]
    began = time.perf_counter()
    called_all = first_calls(Path(model_dir), env, items + tickets, settings,
                             args.max_tokens or config.episode.max_tokens)
    probe_seconds = time.perf_counter() - began
    called, ticket_calls = called_all[:len(items)], called_all[len(items):]
    table: Counter[tuple[str, str, str]] = Counter()
    showing: Counter[tuple[str, str, str]] = Counter()
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for item, (tool, shows) in zip(items, called, strict=True):
        category = qa_category(QAItem.model_validate(item.task))
        offered = "both" if set(QA_BASIC_TOOLS) <= set(item.catalog_tools) else "one"
        table[(category, offered, tool)] += 1
        showing[(category, offered, tool)] += shows
        if category in CATEGORY_TOOLS:
            total[category] += 1
            right[category] += tool in CATEGORY_TOOLS[category]
    print(f"{model_dir}: first call of {len(items)} held-out QA items (greedy, llama.cpp), {probe_seconds:.0f} s"
          + (f"; warm start trained in {sft_seconds:.0f} s" if sft_seconds is not None else ""))
    for (category, offered, tool), n in sorted(table.items()):
        print(f"  {category:14} basic tools offered: {offered:4} -> {tool:18} {n:3}"
              f"   result shows the answer: {showing[(category, offered, tool)]}")
    for category in sorted(total):
        print(f"{category}: the fitting tool first in {right[category]}/{total[category]}")
    golden_first = sum(tool in set(t.required_tools) for t, (tool, _) in zip(tickets, ticket_calls, strict=True))
    accepted = sum(ok for _, ok in ticket_calls)
    ticket_tools = Counter(tool if tool in set(t.required_tools) else ("(domain tool)" if tool in set(t.domain_tools)
                           else tool) for t, (tool, _) in zip(tickets, ticket_calls, strict=True))
    if tickets:
        print(f"tickets ({len(tickets)} held out): a golden tool first in {golden_first}, its arguments accepted in "
              f"{accepted}; first calls: " + ", ".join(f"{name} {n}" for name, n in ticket_tools.most_common(6)))
    if args.json:
        print(json.dumps({
            "benchmark": "routing", "model": str(model_dir), "items": len(items), "probe_seconds": probe_seconds,
            "sft_seconds": sft_seconds,
            "calls": [{"category": c, "offered": o, "tool": t, "n": n, "shows_answer": showing[(c, o, t)]}
                      for (c, o, t), n in sorted(table.items())],
            "fitting_first": {c: {"right": right[c], "n": total[c]} for c in sorted(total)},
            "tickets": {"n": len(tickets), "golden_tool_first": golden_first, "arguments_accepted": accepted},
        }))


if __name__ == "__main__":
    main()
