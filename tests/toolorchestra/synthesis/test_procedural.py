"""Procedural synthesis: seeded, deterministic, replayable tasks on shared and unseen domains."""

from __future__ import annotations

import pytest
from helpers.domains import events_db
from helpers.third_party import TOOLSCALE, domain_folder

from toolorchestra.core.errors import OrchestraError
from toolorchestra.envs.domain import Domain, load_domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.evaluation import Trajectory, evaluate, golden_state
from toolorchestra.envs.state import BaseDb
from toolorchestra.envs.task import StructuredUserInstructions, dump_tasks, parse_tasks
from toolorchestra.synthesis.domains import embedded_names, load_embedded
from toolorchestra.synthesis.procedural import ProceduralConfig, synthesize_tasks


def check_tasks(domain: Domain, tasks) -> None:
    """Every golden replay succeeds, the golden trajectory scores 1, the JSON round-trips."""
    engine = Engine(domain.tool_specs(), domain.layouts)
    base = BaseDb(domain.db, domain.layouts)
    writes = 0
    for task in tasks:
        state, results = golden_state(engine, base, task)
        assert evaluate(task, Trajectory.golden(task), engine=engine, base=base).reward == 1.0
        said = " ".join(str(r) for r in results)
        assert all(info in said or info in ("yes", "no") for info in task.communicate_info)
        assert isinstance(task.user_scenario.instructions, StructuredUserInstructions)
        assert task.user_scenario.instructions.task_instructions
        writes += state.hash() != DbState_hash(base)
    assert writes >= len(tasks) // 2  # most tasks change the database
    assert dump_tasks(parse_tasks(dump_tasks(tasks))) == dump_tasks(tasks)


def DbState_hash(base):
    from toolorchestra.envs.state import DbState

    return DbState(base).hash()


@pytest.mark.parametrize("name", [*TOOLSCALE, "tau2-mock"])
def test_shared_domains_give_50_replayable_tasks(name):
    path = domain_folder(name)
    domain = load_domain(path)
    tasks, report = synthesize_tasks(domain, 50, seed=11)
    assert report.produced == len(tasks) == 50 and report.note is None
    assert len({t.id for t in tasks}) == 50
    check_tasks(domain, tasks)


def test_unseen_domain(tmp_path):
    domain = Domain("events", events_db())
    tasks, report = synthesize_tasks(domain, 50, seed=5)
    assert report.produced == 50
    check_tasks(domain, tasks)
    names = {a.name for t in tasks for a in t.actions}
    assert any(n.startswith("list_") for n in names) and any(n.startswith(("update_", "set_")) for n in names)


@pytest.mark.parametrize("name", embedded_names())
def test_embedded_domains(name):
    domain = load_embedded(name, seed=1, size=30)
    tasks, report = synthesize_tasks(domain, 40, seed=2)
    assert report.produced == 40
    check_tasks(domain, tasks)


def test_deterministic_and_seed_sensitive():
    domain = Domain("events", events_db())
    a = dump_tasks(synthesize_tasks(domain, 20, seed=3)[0])
    b = dump_tasks(synthesize_tasks(Domain("events", events_db()), 20, seed=3)[0])
    c = dump_tasks(synthesize_tasks(domain, 20, seed=4)[0])
    assert a == b and a != c


def test_difficulty_knobs_and_tool_subset():
    domain = Domain("events", events_db())
    easy, _ = synthesize_tasks(domain, 20, seed=1, config=ProceduralConfig(max_hops=0, p_condition=0,
                                                                            p_second_write=0, read_only_fraction=0))
    hard, _ = synthesize_tasks(domain, 20, seed=1, config=ProceduralConfig(min_hops=2, max_hops=2, p_second_write=1))
    def mean(ts):
        return sum(len(t.actions) for t in ts) / len(ts)
    assert mean(hard) > mean(easy) + 1
    subset = ["get_ticket_details", "find_ticket_by_holder_email", "set_ticket_status_refunded"]
    only, report = synthesize_tasks(domain, 10, seed=1, config=ProceduralConfig(tools=subset, read_only_fraction=0))
    assert only and {a.name for t in only for a in t.actions} <= set(subset)
    with pytest.raises(OrchestraError, match="unknown tools"):
        synthesize_tasks(domain, 1, config=ProceduralConfig(tools=["rm_rf"]))


def test_small_database_reports_why_it_falls_short():
    domain = Domain("tiny", {"things": {"t1": {"id": "t1", "kind": "a"}}})
    tasks, report = synthesize_tasks(domain, 30, seed=0, config=ProceduralConfig(attempts_per_task=3))
    assert len(tasks) < 30 and report.note and "cannot support more" in report.note
