"""Preference pairs composed from a template grammar over the catalog (the embedded default).

Each *kind* of preference has a few sentence templates and a set of slot fillings; the vector
follows from the filling by construction, so no LLM is needed and every pair is right:

| kind | example instruction | vector (besides accuracy 1) |
| --- | --- | --- |
| `accuracy` | "Get the right answer, no matter the cost or time." | - |
| `cost` | "I care a lot about keeping the bill low." | cost +w |
| `latency` | "More than accuracy, I care about getting an answer quickly." | latency +w |
| `cost_latency` | "I moderately care about keeping it quick and inexpensive." | cost +w, latency +w |
| `avoid_tool` | "Never use the web search tool for this task." | calls/web_search -w |
| `prefer_tool` | "Please use `code_interpreter` when you can." | calls/code_interpreter +w |
| `avoid_model` | "Do not ask the smollm2-vote5 expert." | models/smollm2-vote5 -w |
| `local_only` | "Keep my data local: do not send anything to outside services." | calls/T -w for every tool that leaves the machine, models/M -w for every model served off it |

The strength words map to weights (`a little` 0.25 ... `more than accuracy` 2.0; `try not to` 0.5,
`avoid` 1, `never` 2), so "More than accuracy, I care about ..." gives the cost term twice the
accuracy weight. "Local" tools are those whose calls stay on this machine (`remote_tools`);
"remote" models are those served by a hosted or non-local endpoint (`remote_models`). An
`avoid_model` filling exists for every model an expert tool routes to (a model-level preference:
"do not ask M" covers every tool that asks M, `models/<alias>` counts its calls).

Generation is **block-diagonal** so the pairs can be split without leakage: within a kind the
templates and the (slots, vector) fillings are shuffled and cut into `blocks`; block i combines
only its own templates with its own fillings. A template or a vector therefore belongs to exactly
one block, and `split.py` can send whole blocks to train or eval.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from urllib.parse import urlparse

from toolorchestra.preferences.pairs import (
    ACCURACY,
    CALLS,
    COST,
    LATENCY,
    MODELS,
    Intent,
    PreferencePair,
    pair_id,
)
from toolorchestra.tools.catalog import Catalog, ExpertBackend, ToolEntry, WebSearchBackend

KINDS = ("accuracy", "cost", "latency", "cost_latency", "avoid_tool", "prefer_tool", "avoid_model", "local_only")

# "{importance} <noun phrase>": how much the user cares, and the weight that expresses it.
IMPORTANCE = (("I care a little about", 0.25), ("I moderately care about", 0.5),
              ("I care a lot about", 1.0), ("More than accuracy, I care about", 2.0))
AVOID = (("Try not to use", 0.5), ("Avoid using", 1.0), ("Never use", 2.0))
AVOID_ASKING = (("Try not to ask", 0.5), ("Do not ask", 1.0), ("Never ask", 2.0))
PREFER = (("If it helps, use", 0.5), ("Please use", 1.0), ("Make sure to use", 2.0))
LOCAL = (("", 1.5), (" This is a strict requirement.", 3.0))

TEMPLATES: dict[str, tuple[str, ...]] = {
    "accuracy": (
        "Accuracy is all that matters; spend whatever it takes.",
        "Get the right answer, no matter the cost or time.",
        "I only care that the answer is correct.",
        "Take as long and spend as much as you need, but be right.",
        "Correctness first; cost and speed are irrelevant to me.",
        "Do whatever gives the most reliable answer.",
    ),
    "cost": (
        "{importance} keeping the bill low.",
        "{importance} not spending much on this.",
        "{importance} how much money this costs.",
        "{importance} saving money on tool and model calls.",
        "{importance} a cheap solution.",
        "{importance} the total price of answering.",
        "{importance} a low-cost approach to this task.",
        "{importance} minimising what you spend.",
    ),
    "latency": (
        "{importance} getting an answer quickly.",
        "{importance} how long this takes.",
        "{importance} a fast response.",
        "{importance} low latency.",
        "{importance} not waiting long for the result.",
        "{importance} speed.",
        "{importance} finishing this in little time.",
        "{importance} a quick turnaround.",
    ),
    "cost_latency": (
        "{importance} getting a fast, cheap answer.",
        "{importance} both the time and the money this takes.",
        "{importance} keeping it quick and inexpensive.",
        "{importance} minimal waiting and minimal spending.",
        "{importance} speed and price alike.",
        "{importance} an answer that is both cheap and quick.",
    ),
    "avoid_tool": (
        "{avoid} {tool}.",
        "{avoid} {tool} for this task.",
        "{avoid} {tool}; other tools are fine.",
        "{avoid} {tool}, I do not trust it.",
        "{avoid} {tool} here, please.",
        "{avoid} {tool} - solve it another way.",
        "{avoid} {tool} when answering me.",
        "{avoid} {tool} while working on this.",
    ),
    "prefer_tool": (
        "{prefer} {tool}.",
        "{prefer} {tool} for this task.",
        "{prefer} {tool} when you can.",
        "{prefer} {tool}; I trust its results.",
        "{prefer} {tool} before anything else.",
        "{prefer} {tool} to check your work.",
        "{prefer} {tool} if it is relevant.",
        "{prefer} {tool} as your main tool.",
    ),
    "avoid_model": (
        "{avoid} the {model} expert.",
        "{avoid} the {model} expert for this task.",
        "{avoid} the {model} model; other experts are fine.",
        "{avoid} the {model} expert, I do not trust it.",
        "{avoid} the {model} model here, please.",
        "{avoid} the {model} expert - solve it another way.",
    ),
    "local_only": (
        "Keep my data local: do not send anything to outside services.{strict}",
        "Nothing may leave this machine; use only local tools.{strict}",
        "My data is confidential, so stay on local tools.{strict}",
        "Do not use any external or hosted service for this.{strict}",
        "Everything must run on this computer, not in the cloud.{strict}",
        "No third-party services, please: my data stays here.{strict}",
    ),
}


@dataclass(frozen=True)
class Filling:
    slots: dict[str, str]
    vector: dict[str, float]
    intents: tuple[Intent, ...]


def tool_phrase(entry: ToolEntry, variant: int) -> str:
    """How an instruction names a tool: `web_search` -> "the web search tool" or "`web_search`"."""
    spoken = entry.name.replace("_", " ").replace("-", " ")
    return (f"the {spoken} tool", f"`{entry.name}`")[variant % 2]


def _is_local_url(url: str | None) -> bool:
    if url is None:
        return False  # no base_url: the provider's hosted API
    host = urlparse(url).hostname or ""
    return host in ("localhost", "127.0.0.1", "::1") or host.endswith(".localhost")


def _is_remote_model(catalog: Catalog, alias: str) -> bool:
    backend = catalog.models[alias].backend
    return getattr(backend, "kind", "local") not in ("local", "llamacpp") and not _is_local_url(
        getattr(backend, "base_url", None))


def remote_models(catalog: Catalog) -> list[str]:
    """Expert models (those an LLM tool routes to) served off this machine: a hosted API or a
    non-local endpoint."""
    return [a for a in expert_models(catalog) if _is_remote_model(catalog, a)]


def expert_models(catalog: Catalog) -> list[str]:
    """The models an LLM tool routes to, in catalog order."""
    routed = {a for t in catalog.tools if isinstance(t.backend, ExpertBackend) for a in t.backend.models}
    return [a for a in catalog.models if a in routed]


def remote_tools(catalog: Catalog) -> list[str]:
    """Tools whose calls leave this machine: web search, and LLM tools routing to a model served
    by a non-local endpoint."""
    out = []
    for tool in catalog.tools:
        backend = tool.backend
        if isinstance(backend, WebSearchBackend):
            out.append(tool.name)
        elif isinstance(backend, ExpertBackend) and any(_is_remote_model(catalog, a) for a in backend.models):
            out.append(tool.name)
    return out


def fillings(kind: str, catalog: Catalog) -> list[Filling]:
    """Every (slots, vector) a kind can take for this catalog."""
    acc = Intent(key=ACCURACY, prefer="higher")
    if kind == "accuracy":
        return [Filling({}, {ACCURACY: 1.0}, (acc,))]
    if kind in ("cost", "latency", "cost_latency"):
        keys = [COST, LATENCY] if kind == "cost_latency" else [kind]
        return [Filling({"importance": phrase}, {ACCURACY: 1.0, **{k: w for k in keys}},
                        (acc, *(Intent(key=k, prefer="lower") for k in keys)))
                for phrase, w in IMPORTANCE]
    if kind in ("avoid_tool", "prefer_tool"):
        levels, sign, prefer = (AVOID, -1.0, "lower") if kind == "avoid_tool" else (PREFER, 1.0, "higher")
        slot = "avoid" if kind == "avoid_tool" else "prefer"
        return [Filling({slot: phrase, "tool": tool.name}, {ACCURACY: 1.0, f"{CALLS}{tool.name}": sign * w},
                        (acc, Intent(key=f"{CALLS}{tool.name}", prefer=prefer)))  # type: ignore[arg-type]
                for tool in catalog.tools for phrase, w in levels]
    if kind == "avoid_model":
        return [Filling({"avoid": phrase, "model": alias}, {ACCURACY: 1.0, f"{MODELS}{alias}": -w},
                        (acc, Intent(key=f"{MODELS}{alias}", prefer="lower")))
                for alias in expert_models(catalog) for phrase, w in AVOID_ASKING]
    if kind == "local_only":
        remote = [f"{CALLS}{t}" for t in remote_tools(catalog)] + [f"{MODELS}{a}" for a in remote_models(catalog)]
        if not remote:
            return []  # nothing leaves the machine: the kind cannot be expressed for this catalog
        return [Filling({"strict": phrase, "tools": ",".join(remote_tools(catalog))},
                        {ACCURACY: 1.0, **{key: -w for key in remote}},
                        (acc, *(Intent(key=key, prefer="lower") for key in remote)))
                for phrase, w in LOCAL]
    raise ValueError(f"unknown preference kind {kind!r}; known: {list(KINDS)}")


def render(template: str, filling: Filling, catalog: Catalog, variant: int) -> str:
    slots = dict(filling.slots)
    if "tool" in slots:
        slots["tool"] = tool_phrase(catalog.tool(slots["tool"]), variant)
    slots.pop("tools", None)
    return template.format(**slots)


def generate_grammar_pairs(catalog: Catalog, *, kinds: list[str] | None = None, blocks: int = 4,
                           seed: int = 0) -> tuple[list[PreferencePair], dict[str, str]]:
    """All grammar pairs for `catalog`, block-diagonal per kind; also notes on skipped kinds."""
    if blocks < 1:
        raise ValueError("blocks must be at least 1")
    wanted = list(kinds) if kinds is not None else list(KINDS)
    unknown = sorted(set(wanted) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown preference kinds {unknown}; known: {list(KINDS)}")
    pairs: list[PreferencePair] = []
    notes: dict[str, str] = {}
    for kind in wanted:
        rng = random.Random(f"{seed}:{kind}")
        templates = list(enumerate(TEMPLATES[kind]))
        options = fillings(kind, catalog)
        if not options:
            notes[kind] = "no tool of this catalog leaves the machine" if kind == "local_only" else "no fillings"
            continue
        rng.shuffle(templates)
        rng.shuffle(options)
        n = min(blocks, len(templates), len(options))
        for block in range(n):
            for index, template in templates[block::n]:
                for filling in options[block::n]:
                    text = render(template, filling, catalog, variant=index)
                    pairs.append(PreferencePair(
                        id=pair_id(kind, text, filling.vector), instruction=text, vector=filling.vector,
                        kind=kind, template=f"{kind}/{index}", intents=list(filling.intents),
                        source="grammar", slots={**filling.slots, "block": str(block)},
                    ))
    return pairs, notes
