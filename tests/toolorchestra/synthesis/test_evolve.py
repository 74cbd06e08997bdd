"""Evolve: harder variants that still replay and score 1 when solved."""

from __future__ import annotations

from helpers.domains import events_db
from helpers.third_party import third_party

from toolorchestra.envs.domain import Domain, load_domain
from toolorchestra.envs.evaluation import Trajectory, evaluate, golden_state
from toolorchestra.synthesis.evolve import evolve_task
from toolorchestra.synthesis.procedural import ProceduralSynthesizer


def run(domain: Domain) -> None:
    synth = ProceduralSynthesizer(domain, seed=4)
    tasks, _ = synth.generate(20)
    evolved = [(t, e) for t in tasks if (e := evolve_task(t, synth, seed=4)) is not None]
    assert len(evolved) >= 15
    for task, harder in evolved:
        assert harder.id == f"{task.id}-e1"
        assert harder.family == harder.description.evolved_from == task.id == task.family
        grew = len(harder.actions) > len(task.actions) or len(harder.communicate_info) > len(task.communicate_info)
        assert grew and [a.name for a in harder.actions[: len(task.actions)]] == [a.name for a in task.actions]
        assert harder.user_scenario.instructions.task_instructions != task.user_scenario.instructions.task_instructions
        golden_state(synth.engine, synth.base, harder)
        assert evaluate(harder, Trajectory.golden(harder), engine=synth.engine, base=synth.base).reward == 1.0
        # solving only the original task no longer suffices
        assert evaluate(harder, Trajectory.golden(task), engine=synth.engine, base=synth.base).reward == 0.0
    again = evolve_task(evolved[0][1], synth, seed=4)
    assert again is None or (again.id.endswith("-e2") and again.family == evolved[0][0].id)  # the root base
    assert evolve_task(tasks[0], synth, seed=4) == evolve_task(tasks[0], synth, seed=4)  # deterministic


def test_evolve_unseen_domain():
    run(Domain("events", events_db()))


def test_evolve_bank():
    run(load_domain(third_party("toolscale", "bank")))


def test_family_of_tasks_written_before_evolved_from_existed():
    from toolorchestra.envs.task import Task

    scenario = {"instructions": "Find my order."}
    old = Task(id="shop-s0-0003-e2", user_scenario=scenario,
               description={"notes": "chain; evolved from shop-s0-0003 (ask); evolved from shop-s0-0003-e1 (write)"})
    assert old.family == "shop-s0-0003"  # the first "evolved from" is the family's base
    assert Task(id="x", user_scenario=scenario).family == "x"
    assert Task(id="y", user_scenario=scenario, description={"notes": "plain"}).family == "y"
