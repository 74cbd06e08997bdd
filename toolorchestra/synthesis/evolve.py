"""Evolve: make a task harder, as the paper's "complicate" step does, without an LLM.

The task's golden actions are replayed, then the chain is extended from a record the task
already reached: ask for one more value, hop to a related record and ask about it, add another
write, or add a write guarded by a condition the agent must check. The new steps run through the
engine like the originals, so the evolved task still replays and its new `communicate_info`
values are what the reads returned. Returns None when no extension applies. The evolved task
records its family's base task in `description.evolved_from` (`Task.family`), so the training
split and the evaluation's held-out set keep a base task and its evolutions on one side.

Usage: `harder = evolve_task(task, synth, seed=3)` with a `ProceduralSynthesizer` for the domain.
"""

from __future__ import annotations

import random

from toolorchestra.envs.engine import ToolCallError
from toolorchestra.envs.evaluation import golden_state
from toolorchestra.envs.state import values_at
from toolorchestra.envs.task import Action, StructuredUserInstructions, Task
from toolorchestra.envs.toolspec import GetSpec
from toolorchestra.synthesis.chain import Chain, Node, clean
from toolorchestra.synthesis.procedural import CLOSING, ProceduralSynthesizer, stable_seed

EXTENSIONS = ("ask", "hop_ask", "write", "condition")


def _reached(synth: ProceduralSynthesizer, task: Task) -> list[Node]:
    """Records the task's golden `get` calls read, most recent first."""
    nodes: list[Node] = []
    for action in reversed(task.actions):
        spec = synth.engine.specs.get(action.name)
        if isinstance(spec, GetSpec) and spec.id_param in action.arguments:
            rid = action.arguments[spec.id_param]
            if all(n.rid != rid for n in nodes):
                entity = synth.domain.schema.tables[spec.table].entity.replace("_", " ")
                nodes.append(Node(spec.table, rid, f"the same {entity}" if nodes else f"that {entity}"))
    return nodes


def evolve_task(task: Task, synth: ProceduralSynthesizer, *, seed: int = 0) -> Task | None:
    rng = random.Random(stable_seed("evolve", seed, task.id))
    synth.fake.seed_instance(stable_seed("evolve-faker", seed, task.id))
    state, _ = golden_state(synth.engine, synth.base, task)
    nodes = [n for n in _reached(synth, task) if state.exists(n.table, n.rid)]
    if not nodes:
        return None
    builder = synth.builder(state, rng)
    asked = {path for n in nodes for path in _asked_paths(synth, state, n, task.communicate_info)}
    for kind in rng.sample(EXTENSIONS, len(EXTENSIONS)):
        chain = Chain(nodes=list(nodes))
        node = nodes[0]
        try:
            if kind == "ask":
                ok = builder.ask(chain, node, exclude=asked)
            elif kind == "hop_ask":
                new = builder.hop(chain, node)
                ok = new is not None and builder.ask(chain, new)
            else:
                done = {a.name for a in task.actions}
                ok = builder.write(chain, node, condition=kind == "condition", exclude=done)
        except ToolCallError:
            ok = False
        if ok and chain.steps + chain.communicate:
            return _extend(task, chain, kind)
        # a failed attempt may have run calls on the state: start the next one afresh
        state, _ = golden_state(synth.engine, synth.base, task)
        builder = synth.builder(state, rng)
    return None


def _asked_paths(synth: ProceduralSynthesizer, state, node: Node, infos: list[str]) -> set[str]:
    record = state.get(node.table, node.rid)
    out = set()
    for info in synth.domain.schema.tables[node.table].fields.values():
        if any(str(v) in infos for v in values_at(record, info.segments)):
            out.add(info.path)
    return out


def _extend(task: Task, chain: Chain, kind: str) -> Task:
    data = task.model_dump(mode="json", exclude_unset=True)
    crit = data.setdefault("evaluation_criteria", {})
    start = len(task.actions)
    crit["actions"] = [*crit.get("actions", []), *(
        Action(action_id=f"a{start + i}", name=s.name, arguments=s.arguments).model_dump(exclude_unset=True)
        for i, s in enumerate(chain.steps))]
    communicate = [*task.communicate_info, *chain.communicate]
    crit["communicate_info"] = communicate
    basis = crit.get("reward_basis") or ["DB", "COMMUNICATE"]
    if communicate and "COMMUNICATE" not in basis:
        basis = [*basis, "COMMUNICATE"]
    crit["reward_basis"] = basis
    level = int(task.id.rsplit("-e", 1)[1]) + 1 if "-e" in task.id and task.id.rsplit("-e", 1)[1].isdigit() else 1
    data["id"] = f"{task.id.rsplit('-e', 1)[0] if level > 1 else task.id}-e{level}"
    desc = data.setdefault("description", {})
    desc["notes"] = clean(f"{desc.get('notes') or ''}; evolved from {task.id} ({kind})")
    desc["evolved_from"] = task.family  # the family's base task, so splits keep the family together
    scenario = data["user_scenario"]
    extra = clean(" ".join(chain.instructions))
    if isinstance(task.user_scenario.instructions, StructuredUserInstructions):
        ins = scenario["instructions"]
        body = ins["task_instructions"].replace(CLOSING, "")
        ins["task_instructions"] = clean(f"{body} Then: {extra} {CLOSING}")
        ins["reason_for_call"] = clean(ins["reason_for_call"].rstrip(".") + "; then " + "; then ".join(chain.goals) + ".")
        if chain.unknown:
            ins["unknown_info"] = clean(f"{ins.get('unknown_info') or ''} {' '.join(chain.unknown)}")
    else:
        scenario["instructions"] = clean(f"{scenario['instructions']} Also: {extra}")
    return Task.model_validate(data)
