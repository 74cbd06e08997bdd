"""Helpers shared by the evaluation, registry and stage tests: a small validated task folder, a
scripted expert, a checkpoint of the tiny random-weight model, and preference pairs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolorchestra.llm.base import LLM, Completion, Usage


class ScriptedLLM(LLM):
    """Replies with a fixed text (or one from `replies`, in turn); counts calls."""

    def __init__(self, reply: str = "42", model: str = "scripted", replies: list[str] | None = None) -> None:
        self.reply, self.model, self.replies, self.calls = reply, model, list(replies or []), 0
        self.prompts: list[list[dict[str, Any]]] = []

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        self.calls += 1
        self.prompts.append(messages)
        text = self.replies.pop(0) if self.replies else self.reply
        return Completion(text=text, usage=Usage(prompt_tokens=100, completion_tokens=10), latency_s=0.01,
                          model=self.model)


def write_tasks_folder(root: Path, *, domain: str = "library", tasks: int = 12, qa: int = 6, seed: int = 0) -> Path:
    """`root/toolscale/<domain>/...` (easy procedural tasks) and `root/qa/<domain>.jsonl`."""
    from toolorchestra.synthesis.build import synthesize_domain, write_domain_folder
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.synthesis.procedural import ProceduralConfig

    loaded = load_embedded(domain, seed=seed, size=20)
    easy = ProceduralConfig(max_hops=0, p_condition=0.0, p_second_write=0.0)
    result = synthesize_domain(loaded, tasks=tasks, seed=seed, qa=qa, evolve_fraction=0.0, config=easy)
    write_domain_folder(root / "toolscale" / domain, result, qa_file=root / "qa" / f"{domain}.jsonl",
                        docs_file=root / "qa" / "docs" / f"{domain}.jsonl")
    return root


def tiny_catalog_data(model_dir: Path | str) -> dict[str, Any]:
    """A catalog whose only model is the tiny local model (so nothing slow loads): an `answer`
    expert, `enhance_reasoning` and the code interpreter."""
    return {
        "policy": "tiny",
        "models": {"tiny": {"backend": {"kind": "local", "model": str(model_dir)},
                            "price": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}}},
        "tools": [
            {"name": "code_interpreter", "kind": "code", "description": "Run Python.",
             "backend": {"type": "code_interpreter", "wall_time_s": 5}, "price": {"per_call": 0.0001}},
            {"name": "enhance_reasoning", "kind": "llm", "description": "Expert writes and runs code.",
             "backend": {"type": "expert", "role": "reason", "models": ["tiny"], "max_tokens": 16}},
            {"name": "answer", "kind": "llm", "description": "Expert answers. Ends the task.",
             "backend": {"type": "expert", "role": "answer", "models": ["tiny"], "max_tokens": 8}},
        ],
    }


def save_tiny_model(tiny_llm: Any, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tiny_llm.lm.save_pretrained(folder)
    tiny_llm.tokenizer.save_pretrained(folder)
    return folder


def make_checkpoint(tiny_llm: Any, folder: Path, *, base_model: Path, catalog_data: dict[str, Any],
                    perturb: float = 0.0, max_turns: int = 2) -> Path:
    """An orchestrator checkpoint (rl.checkpoint layout) of the tiny model; `perturb` adds a
    constant to one weight so two checkpoints differ."""
    import torch

    from toolorchestra.rl.checkpoint import save_checkpoint
    from toolorchestra.tools.catalog import parse_catalog

    catalog = parse_catalog(catalog_data, source="<test>", base_dir=folder.parent)
    model = tiny_llm.lm
    if perturb:
        import copy

        model = copy.deepcopy(model)
        with torch.no_grad():
            next(model.parameters()).add_(perturb)
    return save_checkpoint(model, tiny_llm.tokenizer, folder, catalog=catalog, manifest={
        "name": "orchestrator", "base_model": str(base_model), "backend": "trl", "steps": {"sft": 1, "grpo": 1},
        "episode": {"max_turns": max_turns, "max_tokens": 16}, "policy_alias": "tiny", "instances": 4,
    })


def write_preferences(folder: Path, catalog_data: dict[str, Any]) -> Path:
    """`folder/eval.jsonl`: grammar pairs of three kinds for the catalog."""
    from toolorchestra.preferences.grammar import generate_grammar_pairs
    from toolorchestra.preferences.pairs import save_pairs
    from toolorchestra.tools.catalog import parse_catalog

    catalog = parse_catalog(catalog_data, source="<test>")
    pairs, _ = generate_grammar_pairs(catalog, kinds=["avoid_tool", "prefer_tool", "cost"], blocks=1)
    folder.mkdir(parents=True, exist_ok=True)
    save_pairs(folder / "eval.jsonl", pairs)
    return folder


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
