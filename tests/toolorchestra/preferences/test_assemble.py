"""Training-set assembly: required tools always offered, random subsets, perturbed prices, no task
or preference shared between train and eval."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from toolorchestra.episodes.pool import load_pool, task_domain
from toolorchestra.preferences.assemble import AssemblyConfig, assemble, choose_tools, perturbed, split_tasks
from toolorchestra.preferences.grammar import generate_grammar_pairs
from toolorchestra.preferences.pairs import Intent, PreferencePair
from toolorchestra.preferences.split import SplitConfig, split_pairs
from toolorchestra.tools.catalog import Price

REPO = Path(__file__).resolve().parents[3]
CHEAP = PreferencePair(id="cost-1", instruction="Keep the cost as low as you can.", vector={"accuracy": 1.0, "cost": 0.5},
                       kind="cost", template="t-cost", intents=[Intent(key="cost", prefer="lower")])


@pytest.fixture
def built(expert_catalog, validated):
    pool = load_pool(validated)
    pairs, _ = generate_grammar_pairs(expert_catalog)
    train, evaluation = split_pairs(pairs, SplitConfig())
    config = AssemblyConfig(instances_per_task=4, p_no_preference=0.25, eval_task_fraction=0.25, seed=3)
    return pool, train, evaluation, assemble(pool, expert_catalog, train, evaluation, config), config


def test_instances_respect_requirements(built, expert_catalog):
    pool, train_pairs, eval_pairs, instances, config = built
    catalog_names = [t.name for t in expert_catalog.tools]
    for split, pairs in (("train", train_pairs), ("eval", eval_pairs)):
        ids = {p.id for p in pairs}
        for inst in instances[split]:
            assert inst.split == split
            assert inst.catalog_tools == [n for n in catalog_names if n in inst.catalog_tools]  # catalog order
            assert len(inst.catalog_tools) >= config.min_catalog_tools
            if inst.kind == "qa":
                assert "answer" in inst.catalog_tools and inst.domain_tools == []
            else:
                assert "get_customer_details" in inst.domain_tools and inst.domain == "shop"
            if inst.preference is not None:
                assert inst.preference.id in ids  # eval instances only carry eval preferences
                assert set(inst.preference.tools) <= set(inst.catalog_tools)
                assert inst.prompt[1]["content"].endswith(f"User preference: {inst.preference.instruction}")
            assert set(inst.tool_prices) == set(inst.catalog_tools)
            assert "Prices of your tools (USD):" in inst.prompt[0]["content"]


def test_tasks_do_not_leak_and_every_stratum_is_evaluated(built):
    pool, _, _, instances, _ = built
    train_ids = {i.task_id for i in instances["train"]}
    eval_ids = {i.task_id for i in instances["eval"]}
    assert not train_ids & eval_ids
    assert len(train_ids | eval_ids) == len(pool)
    assert {i.data_source for i in instances["eval"]} == {
        "toolorchestra/qa/qa_numeric", "toolorchestra/qa/qa_lookup", "toolorchestra/toolscale/shop"}


def test_randomisation_varies_tools_prices_and_preferences(built, expert_catalog):
    _, _, _, instances, config = built
    train = instances["train"]
    assert len(train) == 4 * len({i.task_id for i in train})
    assert len({tuple(i.catalog_tools) for i in train}) > 3
    base = {t.name: t.price for t in expert_catalog.tools}
    factors = [i.tool_prices["web_search"].per_call / base["web_search"].per_call
               for i in train if "web_search" in i.tool_prices]
    assert len(set(factors)) > 3 and all(1 / config.price_jitter <= f <= config.price_jitter for f in factors)
    model_factors = {round(i.model_prices["smart"].input_per_mtok / 1.0, 6) for i in train}
    assert len(model_factors) > 3
    with_pref = sum(i.preference is not None for i in train) / len(train)
    assert 0.5 < with_pref < 0.95
    assert len(Counter(i.preference.kind for i in train if i.preference)) >= 3


def test_assembly_is_deterministic(expert_catalog, validated, built):
    pool, train, evaluation, instances, config = built
    again = assemble(pool, expert_catalog, train, evaluation, config)
    assert [i.model_dump() for i in again["train"]] == [i.model_dump() for i in instances["train"]]


def test_an_instance_without_a_preference_rewards_cost_and_latency(expert_catalog, validated, tmp_path):
    # Before: such an instance carried no vector and the environment rewarded accuracy only.
    from toolorchestra.core.settings import Settings
    from toolorchestra.episodes.environment import RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.episodes.rows import load_instances, write_verl_parquet

    pool = load_pool(validated)
    config = AssemblyConfig(instances_per_task=3, p_no_preference=1.0, eval_task_fraction=0.25, seed=3,
                            default_preference={"accuracy": 1.0, "cost": 0.4, "latency": 0.2},
                            default_preference_jitter=0.5)
    instances = assemble(pool, expert_catalog, [], [], config)["train"]
    env = RolloutEnvironment(expert_catalog, Settings(workspace=tmp_path), DomainLocator([validated]))
    vectors = [env.preference(i) for i in instances]
    assert all(i.preference is None for i in instances)
    for vector in vectors:
        assert set(vector) == {"accuracy", "cost", "latency"} and vector["accuracy"] == 1.0
        assert 0.2 <= vector["cost"] <= 0.6 and 0.1 <= vector["latency"] <= 0.3
    assert len({(v["cost"], v["latency"]) for v in vectors}) == len(vectors)  # perturbed per instance
    again = assemble(pool, expert_catalog, [], [], config)["train"]
    assert [i.default_preference for i in again] == [i.default_preference for i in instances]  # seeded
    # The exported rows carry it (the trainers read instances back from them).
    loaded = load_instances(write_verl_parquet(instances, tmp_path / "train.parquet"))
    assert [env.preference(i) for i in loaded] == vectors
    # An instance with a user preference is rewarded by that preference's vector.
    with_pref = assemble(pool, expert_catalog, [CHEAP], [CHEAP], config.model_copy(update={"p_no_preference": 0.0}))
    assert all(env.preference(i) == CHEAP.vector and i.default_preference is None for i in with_pref["train"])


def test_default_preference_keys_are_the_rewards():
    with pytest.raises(ValueError, match="unknown key"):
        AssemblyConfig(default_preference={"accuracy": 1.0, "speed": 0.5})


def test_helpers():
    import random

    price = Price(input_per_mtok=1.0, per_call=0.01)
    assert perturbed(price, random.Random(0), 1.0) == price
    scaled = perturbed(price, random.Random(0), 4.0)
    factor = scaled.input_per_mtok
    assert 0.25 <= factor <= 4 and math.isclose(scaled.per_call, 0.01 * factor, rel_tol=1e-5)
    assert scaled.output_per_mtok == 0.0


def test_choose_tools_always_includes_required(expert_catalog):
    import random

    rng = random.Random(1)
    for _ in range(50):
        tools = choose_tools(expert_catalog, ["web_search"], rng, min_tools=2)
        assert "web_search" in tools and len(tools) >= 2


def test_split_tasks_caps_and_fraction(validated):
    pool = load_pool(validated)
    train, evaluation = split_tasks(pool, 0.0, seed=0)
    assert evaluation == [] and len(train) == len(pool)
    train, evaluation = split_tasks(pool, 0.5, seed=0)
    assert len(evaluation) == 2 + 2 + 3
    config = AssemblyConfig(max_tasks=4, eval_task_fraction=0.25)
    out = assemble(pool, load_catalog_for_test(), [], [], config)
    assert len(out["train"]) == 3 and len(out["eval"]) == 1
    assert all(i.preference is None for i in out["train"] + out["eval"])


def load_catalog_for_test():
    from helpers.pref_fixtures import expert_catalog_data

    from toolorchestra.tools.catalog import parse_catalog

    return parse_catalog(expert_catalog_data(), source="x")


def _default_params_pool():
    """The validated tool-use tasks of params.yaml's synthesize/validate sections, in memory."""
    import yaml

    from toolorchestra.envs.domain_tools import DomainEnv
    from toolorchestra.episodes.pool import DomainRef, TaskPool, ToolUseTask
    from toolorchestra.synthesis.build import synthesize_domain
    from toolorchestra.synthesis.domains import load_embedded
    from toolorchestra.synthesis.filters import filter_tasks

    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    synth, validate, seed = params["synthesize"], params["validate"], params["base"]["seed"]
    tasks = []
    for name in synth["domains"]:
        domain = load_embedded(name, seed=seed, size=synth["db_size"])
        made = synthesize_domain(domain, tasks=synth["tasks_per_domain"], seed=seed,
                                 evolve_fraction=synth["evolve_fraction"])
        ref = DomainRef(name=name, folder=REPO)
        ref.__dict__["domain"] = domain  # in memory: the cached property's slot
        tasks += [ToolUseTask(task=t, domain=ref) for t in filter_tasks(made.tasks, DomainEnv(domain)).kept
                  if validate["min_actions"] <= len(t.actions) <= validate["max_actions"]]
    return TaskPool(qa=[], tool_use=tasks), params


def test_default_params_hold_out_no_task_of_a_training_family():
    # Before: tasks were split one by one, and 11 of 18 held-out tool-use tasks were evolved from,
    # or evolved into, a training task (sharing its golden-action prefix).
    import re

    def family(t):  # read from the notes evolve writes, independently of Task.family
        found = re.search(r"evolved from (\S+) \(", t.task.description.notes or "")
        return f"{t.domain.name}/{found.group(1) if found else t.task.id}"

    pool, params = _default_params_pool()
    assert sum(family(t) != t.id for t in pool.tool_use) >= 30  # evolved tasks exist
    train, held = split_tasks(pool, params["preferences"]["assembly"]["eval_task_fraction"], params["base"]["seed"])
    assert len(held) >= 15 and len(train) + len(held) == len(pool.tool_use)
    train_families = {family(t) for t in train}
    assert [t.id for t in held if family(t) in train_families] == []
    assert any(family(t) != t.id for t in held)  # evolved tasks are held out with their base

    def calls(t):
        return [(a.name, json.dumps(a.arguments, sort_keys=True)) for a in t.task.actions]

    shared = [h.id for h in held for t in train if h.domain.name == t.domain.name
              and calls(h)[:len(calls(t))] == calls(t)[:len(calls(h))]]
    assert shared == []  # nor a golden-action prefix (a coincidental one joins the unit too)


def test_split_units_join_families_and_prefixes():
    from toolorchestra.envs.task import Task
    from toolorchestra.episodes.pool import DomainRef, TaskPool, ToolUseTask
    from toolorchestra.preferences.assemble import split_units

    ref = DomainRef(name="d", folder=REPO)

    def task(tid, calls, base=None):
        desc = {"evolved_from": base} if base else None
        return ToolUseTask(task=Task(id=tid, user_scenario={"instructions": "x"}, description=desc,
                                     evaluation_criteria={"actions": [{"action_id": str(i), "name": n, "arguments": {"id": v}}
                                                                      for i, (n, v) in enumerate(calls)]}), domain=ref)

    items = [task("a", [("get", 1)]), task("a-e1", [("get", 1), ("set", 2)], base="a"),
             task("b", [("get", 1), ("get", 3)]),  # starts with a's whole list: same unit
             task("c", [("get", 4)]), task("c-e1", [("get", 4), ("get", 5)], base="c"), task("e", [("get", 9)])]
    units = split_units(items)
    assert units["d/a"] == units["d/a-e1"] == units["d/b"] == "d/a"
    assert units["d/c"] == units["d/c-e1"] == "d/c" and units["d/e"] == "d/e"
    train, held = split_tasks(TaskPool(qa=[], tool_use=items), 0.3, seed=0)
    for group in (("d/a", "d/a-e1", "d/b"), ("d/c", "d/c-e1")):
        sides = {t.id in {h.id for h in held} for t in items if t.id in group}
        assert len(sides) == 1  # one side per unit
    assert held and train


def test_a_heldout_domain_never_trains(validated):
    """Every task of a held-out domain (tool use, and QA items naming it) goes to eval; the other
    domains split as before."""
    pool = load_pool(validated)
    domains = sorted({t.domain.name for t in pool.tool_use})
    unseen = domains[0]
    train, evaluation = split_tasks(pool, 0.25, seed=0, heldout_domains=[unseen])
    assert not [t for t in train if task_domain(t) == unseen]
    assert {t.id for t in pool.tool_use if t.domain.name == unseen} <= {t.id for t in evaluation}
    before_train, _ = split_tasks(pool, 0.25, seed=0)
    assert {t.id for t in train} == {t.id for t in before_train if task_domain(t) != unseen}


def test_an_unknown_heldout_domain_is_a_clear_error(validated):
    """A misspelt held-out domain would hold nothing out (and train on the domain meant to be unseen)."""
    from toolorchestra.core.errors import ConfigError

    with pytest.raises(ConfigError, match="resturant"):
        split_tasks(load_pool(validated), 0.25, seed=0, heldout_domains=["resturant"])


def test_every_qa_item_offers_every_basic_tool(validated, tmp_path):
    # Before: a QA item was offered the basic tool its category needs plus a random sample of the
    # rest, so half the demo's training items offered one basic tool, and a warm start learned to
    # call whichever was offered: held-out lookups offered both went to code_interpreter (17 of 19).
    from helpers.pref_fixtures import expert_catalog_data

    from toolorchestra.tools.catalog import parse_catalog

    data = expert_catalog_data()
    data["tools"].append({"name": "local_search", "kind": "search", "description": "Search the local documents.",
                          "backend": {"type": "local_search", "documents": "corpus"}, "price": {"per_call": 0.00001}})
    catalog = parse_catalog(data, source="<test catalog>", base_dir=tmp_path)
    pairs, _ = generate_grammar_pairs(catalog)
    train, evaluation = split_pairs(pairs, SplitConfig())
    config = AssemblyConfig(instances_per_task=6, p_no_preference=0.5, eval_task_fraction=0.25, seed=5)
    built = assemble(load_pool(validated), catalog, train, evaluation, config)
    qa = [i for split in built.values() for i in split if i.kind == "qa"]
    assert len(qa) >= 6
    assert all({"code_interpreter", "local_search"} <= set(i.catalog_tools) for i in qa)
    tool_use = [i for split in built.values() for i in split if i.kind == "tool_use"]
    assert any("local_search" not in i.catalog_tools for i in tool_use)  # tickets still get random subsets


def test_the_price_sheet_bills_a_program_experts_sandbox_run_at_the_code_tools_price():
    from toolorchestra.preferences.assemble import price_sheet
    from toolorchestra.tools.catalog import load_embedded_catalog

    catalog = load_embedded_catalog()
    tools = ["code_interpreter", "ask_direct", "ask_program"]
    sheet = price_sheet(catalog, tools, {t: catalog.tool(t).price for t in tools},
                        {alias: m.price for alias, m in catalog.models.items()})
    lines = {line.split(":")[0]: line for line in sheet.splitlines()[1:]}
    # the policy sees that asking for a program costs a sandbox run too, not only the expert's tokens
    assert lines["- ask_program"].startswith(
        "- ask_program: its code_interpreter run ($1e-05 per call + $5e-05 per second); models: smollm2 ")
    assert "code_interpreter" not in lines["- ask_direct"]
    assert lines["- code_interpreter"] == "- code_interpreter: $1e-05 per call + $5e-05 per second"
    # offered without the code tool, and with the episode's own (perturbed) price when it is offered
    alone = price_sheet(catalog, ["ask_program"], {"ask_program": Price()}, {"smollm2": Price()})
    assert "its code_interpreter run ($1e-05 per call + $5e-05 per second)" in alone
    jittered = price_sheet(catalog, ["code_interpreter", "ask_program"],
                           {"code_interpreter": Price(per_call=2e-05), "ask_program": Price()}, {"smollm2": Price()})
    assert "- ask_program: its code_interpreter run ($2e-05 per call)" in jittered


def test_a_validation_split_is_carved_from_training_units_and_leaves_eval_unchanged(expert_catalog, validated):
    from toolorchestra.preferences.assemble import split_units

    pool = load_pool(validated)
    config = AssemblyConfig(eval_task_fraction=0.25, seed=3)
    before = assemble(pool, expert_catalog, [], [], config)
    after = assemble(pool, expert_catalog, [], [], config.model_copy(update={"validation_task_fraction": 0.4}))
    assert "validation" not in before

    def ids(out, split):
        return {i.task_id for i in out[split]}

    assert ids(after, "eval") == ids(before, "eval")  # the test task list does not move
    assert ids(after, "validation") and not ids(after, "validation") & ids(after, "train")
    assert ids(after, "train") | ids(after, "validation") == ids(before, "train")
    assert {i.split for i in after["validation"]} == {"validation"}
    unit = split_units([*pool.qa, *pool.tool_use])
    assert not {unit[t] for t in ids(after, "validation")} & {unit[t] for t in ids(after, "train")}
    qa_only = assemble(pool, expert_catalog, [], [], config.model_copy(update={
        "validation_task_fraction": 0.4, "validation_kinds": ["qa"]}))
    assert qa_only["validation"] and {i.kind for i in qa_only["validation"]} == {"qa"}
    assert {i.task_id for i in qa_only["train"] if i.kind == "tool_use"} == {
        i.task_id for i in before["train"] if i.kind == "tool_use"}
