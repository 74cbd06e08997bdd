"""Do lookups show their answer? `local_search` on the flow's lookup questions, as the policy reads it.

    python benchmarks/bench_lookup_window.py [--workspace .] [--max-observation-chars 400] [--json]

Reads a workspace's synthesized lookups (`data/validated/qa/<domain>.jsonl`, category `lookup`:
run the flow up to `validate` first) and the records local search indexes (`data/qa/docs`). Each
question is searched as its golden trajectory searches it (`episodes.environment.lookup_query`:
the quoted key values, scoped to the question's domain), and the observation is cut as an episode
cuts it (`Toolbox`, `--max-observation-chars`, the episode's limit). A lookup is *shown* when that
observation holds the record's key values and the answer (`lookup_shown`, the golden replay's own
test): what a policy that reads well can answer, and what the warm start's golden lookups require. Two arms over the same index, same
run: BM25 reading a document's title with every chunk (the tool until 2026-12-07) and with the
first chunk only (`local_search._lexical_text`). Prints shown / lookups per domain and arm; with
`--json` the last line is one JSON object with them and the totals.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolorchestra.episodes.pool import QAItem

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def lookups(workspace: Path) -> list[tuple[str, QAItem]]:
    """(domain, item) for every lookup of the workspace's validated QA files (read as the flow reads
    them: a broken line is one error naming its file and line)."""
    from toolorchestra.core.errors import ConfigError
    from toolorchestra.episodes.pool import load_qa_file

    try:
        found = [(path.stem, item) for path in sorted((workspace / "data" / "validated" / "qa").glob("*.jsonl"))
                 for item in load_qa_file(path) if item.category == "lookup"]
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    if not found:
        raise SystemExit(f"no lookups under {workspace / 'data/validated/qa'}: run the flow up to validate first")
    return found


def shown(toolboxes, items: list[tuple[str, QAItem]]) -> dict[str, list[int]]:
    """Per domain, [lookups shown, lookups]; `toolboxes` maps a domain to a toolbox whose
    `local_search` is scoped to it."""
    from toolorchestra.episodes.environment import lookup_query, lookup_shown

    per_domain: dict[str, list[int]] = {}
    for domain, item in items:
        result = toolboxes[domain].call("local_search", {"query": lookup_query(item.question)})
        tally = per_domain.setdefault(domain, [0, 0])
        tally[0] += int(lookup_shown(result.observation, item.question, str(item.answer)))
        tally[1] += 1
    return per_domain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--max-observation-chars", type=int, default=400)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object last")
    args = parser.parse_args()

    from toolorchestra.tools import local_search
    from toolorchestra.tools.embeddings import LocalEmbedderConfig, build_embedder
    from toolorchestra.tools.toolbox import Toolbox

    items = lookups(args.workspace)
    tool = local_search.LocalSearch.from_folder(
        args.workspace / "data" / "qa" / "docs", embedder=build_embedder(LocalEmbedderConfig()),
        cache_dir=args.workspace / ".orchestra" / "search-index")
    toolboxes = {domain: Toolbox([tool.scoped(domain)], max_observation_chars=args.max_observation_chars)
                 for domain in {d for d, _ in items}}
    figures: dict[str, dict[str, list[int]]] = {}
    new_text = local_search._lexical_text
    try:
        for arm, lexical_text in (("title_every_chunk", local_search._embedding_text),
                                  ("title_first_chunk", new_text)):
            local_search._lexical_text = lexical_text
            tool.index.__dict__.pop("lexical", None)  # the BM25 index is built from the chunks on first use
            figures[arm] = shown(toolboxes, items)
    finally:
        local_search._lexical_text = new_text
    out: dict[str, object] = {"lookups": len(items), "max_observation_chars": args.max_observation_chars}
    for arm, per_domain in figures.items():
        total = sum(v[0] for v in per_domain.values())
        cells = ", ".join(f"{d} {v[0]}/{v[1]}" for d, v in sorted(per_domain.items()))
        print(f"{arm}: shown {total}/{len(items)} ({cells})")
        out[arm] = {"shown": total, "per_domain": {d: {"shown": v[0], "n": v[1]} for d, v in per_domain.items()}}
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
