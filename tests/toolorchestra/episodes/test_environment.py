"""Rollout episodes: per-episode tools and databases, the shared scorer, golden conversations."""

from __future__ import annotations

import json
import re

import pytest

from toolorchestra.episodes.environment import said_to_user, score_rollout
from toolorchestra.episodes.pool import QAItem


def test_golden_policy_solves_every_tool_use_instance_with_metrics(make_env, tool_use, golden_policy):
    env = make_env()
    instances = tool_use[:4]
    rollouts = env.run(golden_policy(instances), instances, temperature=0.0)
    for rollout, instance in zip(rollouts, instances, strict=True):
        assert rollout.correct and rollout.valid, rollout.details
        metrics = rollout.metrics()
        for action in instance.tau2_task.actions:
            assert metrics[f"calls/{action.name}"] >= 1
        # The policy's tokens are priced at this instance's (perturbed) price for the policy model;
        # every turn after the first rereads the previous turn's 400-token prompt at the cached price.
        price = env.policy_price(instance)
        assert price.cached_input_per_mtok is not None and price.cached_input_per_mtok < price.input_per_mtok
        later = len(rollout.trajectory.turns) - 1
        assert later >= 1 and metrics["cost"] == pytest.approx(
            (400 * price.input_per_mtok + later * 400 * price.cached_input_per_mtok
             + (later + 1) * 30 * price.output_per_mtok) / 1e6)
        assert metrics["latency"] > 0


def test_episodes_of_one_batch_have_separate_databases(make_env, tool_use, golden_policy):
    writer = next(i for i in tool_use if any(a.name.startswith(("update_", "set_", "create_", "delete_"))
                                               for a in i.tau2_task.actions))
    rollouts = make_env().run(golden_policy([writer]), [writer, writer, writer], temperature=0.0)
    # Had the writes shared one database, the second and third replays would diverge from the golden hash.
    assert [r.correct for r in rollouts] == [True, True, True]
    assert len({id(r.trajectory) for r in rollouts}) == 3


def test_malformed_and_wrong_rollouts(make_env, tool_use, golden_policy):
    instance = tool_use[0]
    [malformed] = make_env(max_turns=2).run(golden_policy([instance], "malformed"), [instance])
    assert not malformed.format_valid and not malformed.valid and not malformed.correct
    assert malformed.trajectory.turns[0].error == "malformed_call"
    [wrong] = make_env().run(golden_policy([instance], "wrong"), [instance])
    assert wrong.valid and not wrong.correct
    assert wrong.details["db"] in (0.0, 1.0) and (wrong.details["action"] == 0.0)


def test_qa_instance_is_judged_on_the_expert_answer(make_env, splits, golden_policy, scripted_expert):
    qa = next(i for i in splits["train"] if i.kind == "qa")
    right = make_env(expert_llm=scripted_expert(str(qa.answer)))
    [rollout] = right.run(golden_policy([qa], "answer_tool"), [qa])
    assert rollout.trajectory.stop_reason == "answer_tool" and rollout.correct and rollout.valid
    assert rollout.metrics()["calls/answer"] == 1 and rollout.metrics()["cost"] > 0  # expert tokens priced
    [wrong] = make_env(expert_llm=scripted_expert("certainly not the answer")).run(golden_policy([qa], "answer_tool"), [qa])
    assert wrong.valid and not wrong.correct


def test_domain_tools_are_capped_but_golden_ones_kept(make_env, tool_use):
    env = make_env(max_domain_tools=3)
    for instance in tool_use:
        offered = env.offered_domain_tools(instance)
        assert set(instance.required_tools) <= set(offered)
        assert len(offered) == max(3, len(instance.required_tools))
        assert offered == env.offered_domain_tools(instance)  # seeded: the same every time
    setup = env.setup(tool_use[0])
    names = [s["function"]["name"] for s in setup.specs]
    assert names == env.offered_domain_tools(tool_use[0]) + tool_use[0].catalog_tools


def test_golden_conversation_replays_real_observations(make_env, tool_use, splits):
    env = make_env()
    messages, specs = env.golden_conversation(tool_use[0])
    calls = [m for m in messages if m["role"] == "assistant"][:-1]
    observations = [m for m in messages if m["role"] == "tool"]
    assert len(calls) == len(observations) == len(tool_use[0].tau2_task.actions)
    assert all("<tool_call>" in m["content"] for m in calls)
    assert not any(o["content"].startswith("Error") for o in observations)
    for value in tool_use[0].tau2_task.communicate_info:
        assert value in messages[-1]["content"]
    qa = next(i for i in splits["train"] if i.kind == "qa")
    assert env.golden_conversation(qa) is None


def test_scorer_reads_only_what_was_said_outside_tool_calls(make_env, tool_use, golden_policy):
    env = make_env()
    instance = next(i for i in tool_use if i.tau2_task.communicate_info)
    [rollout] = env.run(golden_policy([instance]), [instance])
    said = said_to_user(rollout.trajectory)
    assert said and not any("<tool_call>" in s for s in said)
    # Remove the final reply: the values were never told to the user, so the task fails.
    rollout.trajectory.turns[-1].text = "Done."
    setup = env.setup(instance)
    for turn in rollout.trajectory.turns:
        if turn.tool:
            setup.toolbox.call(turn.tool, turn.arguments or {})
    correct, details = score_rollout(instance, rollout.trajectory, setup.env)
    assert not correct and details["communicate"] == 0.0


def test_qa_golden_conversations_route_calculations_to_code_and_lookups_to_scoped_search(records_qa):
    """A calculation, count or aggregate replays one code_interpreter call (counts and aggregates
    over the domain's records, which the QA episode's sandbox holds) and answers what it printed; a
    lookup one local_search call (scoped to the item's domain) and answers the value it read; the
    replay is scored like a rollout, so every returned conversation is correct."""
    from toolorchestra.episodes.pool import qa_category
    from toolorchestra.preferences.assemble import build_instances

    env, instances, root, catalog = records_qa
    found = {"qa_arithmetic": 0, "qa_lookup": 0, "qa_numeric": 0}
    for instance in instances:
        category = qa_category(QAItem.model_validate(instance.task))
        golden = env.golden_conversation(instance)
        if golden is None:
            assert category == "qa_lookup"  # a lookup whose passage did not show the answer is left out, not faked
            continue
        messages, specs = golden
        call, observation, reply = messages[-3:]
        tool = "local_search" if category == "qa_lookup" else "code_interpreter"
        assert f'"name": "{tool}"' in call["content"] and observation["role"] == "tool"
        assert str(instance.answer).lower() in observation["content"].lower()
        assert reply["content"] == str(instance.answer) or category != "qa_lookup"
        if tool == "local_search":
            assert all(key in observation["content"] for key in re.findall(r"'([^']+)'", instance.question))
        else:  # the code tool shown to the policy says what the sandbox holds
            [code_spec] = [s["function"] for s in specs if s["function"]["name"] == "code_interpreter"]
            assert "The library database is loaded" in code_spec["description"]
        found[category] += 1
    assert found["qa_arithmetic"] >= 5 and found["qa_lookup"] >= 3 and found["qa_numeric"] >= 2, found
    # A tool-use episode's database changes as it runs: its code tool gets no (stale) copy.
    task = next(i for i in build_instances(root, catalog, include_policy=False, eval_task_fraction=0.2, seed=0)["train"]
                if i.kind == "tool_use")
    setup = env.setup(task.model_copy(update={"catalog_tools": ["code_interpreter"]}))
    assert not setup.toolbox.tools["code_interpreter"].files
    assert "database is loaded" not in setup.specs[-1]["function"]["description"]


def test_a_golden_recovery_runs_the_broken_program_then_the_golden_one(records_qa):
    """The broken try is run in the episode's sandbox (its observation is the real error), then the
    golden program and its printed answer; a "broken" program that works is not a recovery."""
    env, instances, _, _ = records_qa
    item = next(i for i in instances if i.task.get("category") in ("count", "aggregate"))
    program = item.task["program"]
    broken = program.replace("print(", "print(undefined_helper(", 1) + ")"
    messages, _ = env.golden_recovery(item, broken)
    first, error, retry, observation, reply = messages[-5:]
    assert "undefined_helper" in first["content"] and "NameError" in error["content"]
    assert error["content"].startswith("exit status: 1")
    assert json.dumps(program) in retry["content"]
    assert reply["content"] == str(item.answer) and str(item.answer) in observation["content"]
    assert env.golden_recovery(item, program) is None  # it did not fail: nothing to recover from
    lookup = next(i for i in instances if i.task.get("category") == "lookup")
    assert env.golden_recovery(lookup, broken) is None  # no program


def test_an_offered_program_expert_pays_for_its_sandbox_run_when_the_code_tool_is_not_offered(
        rl_tasks, settings, splits, scripted_expert):
    """The episode bills an expert's sandbox run at the code tool's price even when the instance does
    not offer that tool (its prices hold only the offered tools): before, the run was free there."""
    from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.tools.catalog import Price, load_embedded_catalog
    from toolorchestra.tools.experts import EpisodeContext

    catalog = load_embedded_catalog().subset(["code_interpreter", "ask_program"])
    env = RolloutEnvironment(catalog, settings, DomainLocator([rl_tasks]), EpisodeConfig(),
                             llm_for=lambda alias: scripted_expert("```python\nprint(6 * 7)\n```"))
    qa = next(i for i in splits["train"] if i.kind == "qa")
    instance = qa.model_copy(update={"catalog_tools": ["ask_program"], "tool_prices": {"ask_program": Price()},
                                     "model_prices": {"smollm2": Price()}})
    box = env.setup(instance).toolbox
    assert list(box.tools) == ["ask_program"]
    result = box.call("ask_program", {}, EpisodeContext(task="What is 6 * 7?"))
    [(inner, seconds)] = result.inner_calls
    sandbox = catalog.tool("code_interpreter").price
    assert inner == "code_interpreter" and result.data["answer"] == "42"
    assert result.cost_usd == pytest.approx(sandbox.per_call + sandbox.per_second * seconds)


def test_a_programs_printed_value_ends_the_episode_unless_the_episode_config_turns_it_off(records_qa, settings):
    """The embedded catalog's code interpreter ends a calculation on its printed value (the episode's
    domain view keeps the option); `EpisodeConfig(final_answer_line=False)`, as training rollouts
    run, leaves the reply to the policy: the same program's result is then an observation."""
    from toolorchestra.episodes.environment import EpisodeConfig, RolloutEnvironment
    from toolorchestra.episodes.instance import DomainLocator
    from toolorchestra.tools.experts import EpisodeContext

    env, instances, root, catalog = records_qa
    item = next(i for i in instances if i.task.get("program") and i.task.get("category") == "arithmetic")
    call = {"code": item.task["program"]}
    result = env.setup(item).toolbox.call("code_interpreter", call, EpisodeContext(task=item.question))
    assert result.data["final"] and result.data["answer"] == str(item.answer)
    off = RolloutEnvironment(catalog, settings, DomainLocator([root]), EpisodeConfig(final_answer_line=False))
    result = off.setup(item).toolbox.call("code_interpreter", call, EpisodeContext(task=item.question))
    assert result.ok and not result.data.get("final") and str(item.answer) in result.observation
    assert catalog.code_tool().backend.final_answer_line  # the catalog itself is unchanged
    assert not catalog.with_final_answer_line(False).code_tool().backend.final_answer_line
