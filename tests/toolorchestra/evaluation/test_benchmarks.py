"""Benchmark loaders (HLE / FRAMES JSONL, tau2 Task JSON), held-out selection, sampling, pairing."""

from __future__ import annotations

import json
import shutil

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.pool import load_pool
from toolorchestra.evaluation.benchmarks import (
    PreferenceSpec,
    QAFileSpec,
    QASpec,
    Tau2Spec,
    ToolScaleSpec,
    build_benchmarks,
    fingerprint,
    heldout_pool,
    load_qa_jsonl,
    load_tau2,
    preference_items,
    stratified_sample,
)

HLE_ROWS = [
    {"id": "hle-1", "question": "What is 6 * 7?", "answer": "42", "answer_type": "exactMatch", "category": "Math",
     "image": "", "author_name": "x", "rationale": "arithmetic"},
    {"id": "hle-2", "question": "Capital of Australia?", "answer": "Canberra", "answer_type": "exactMatch",
     "category": "Geography"},
]


def test_hle_and_frames_jsonl_load_with_extra_fields(tmp_path):
    path = tmp_path / "hle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in HLE_ROWS) + "\n")
    items = load_qa_jsonl(path, benchmark="hle")
    assert [i.id for i in items] == ["hle-1", "hle-2"]
    assert items[0].kind == "qa" and items[0].key == "hle/hle-1"
    assert items[0].task.model_extra["rationale"] == "arithmetic"  # unknown fields kept
    assert items[0].task.qa_category == "qa_numeric" and items[1].task.qa_category == "qa_lookup"


@pytest.mark.parametrize(("text", "message"), [
    ('{"id": "a", "question": "q", "answer": "1"}\n{not json}\n', "line 2: not JSON"),
    ('{"id": "a", "question": "q"}\n', "line 1: answer"),
    ('{"id": "a", "question": "q", "answer": 1}\n{"id": "a", "question": "r", "answer": 2}\n', "duplicate task ids"),
    ("", "no rows"),
])
def test_broken_qa_files_name_the_file_and_line(tmp_path, text, message):
    path = tmp_path / "frames.jsonl"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_qa_jsonl(path)
    assert "frames.jsonl" in str(info.value)


def test_tau2_tasks_load_with_their_domain(eval_tasks, tmp_path):
    domain = eval_tasks / "toolscale" / "library"
    items = load_tau2(domain / "tasks.json", domain, benchmark="tau2_library")
    tasks = json.loads((domain / "tasks.json").read_text())
    assert len(items) == len(tasks) and items[0].kind == "tool_use"
    assert items[0].id == f"library/{tasks[0]['id']}" and items[0].task.domain.folder == domain.resolve()
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(ConfigError, match="not a domain folder"):
        load_tau2(domain / "tasks.json", bare)


def test_heldout_excludes_training_tasks_or_uses_the_assembly_split(eval_tasks):
    from toolorchestra.preferences.assemble import split_tasks

    pool = load_pool(eval_tasks)
    train_ids = {t.id for t in pool.tool_use[:5]} | {q.id for q in pool.qa[:2]}
    held = heldout_pool(pool, train_ids=train_ids, fraction=0.1, seed=0)
    assert not {t.id for t in held.tool_use} & train_ids and not {q.id for q in held.qa} & train_ids
    assert len(held) == len(pool) - len(train_ids)
    derived = heldout_pool(pool, train_ids=None, fraction=0.25, seed=3)
    _, expected = split_tasks(pool, 0.25, 3)
    assert sorted(t.id for t in [*derived.qa, *derived.tool_use]) == sorted(t.id for t in expected)


def test_a_task_whose_base_trained_is_not_held_out():
    # Before: held out meant "id not in the training set", so an evolved task whose base trained
    # (sharing its golden-action prefix) counted as unseen.
    from pathlib import Path

    from toolorchestra.envs.task import Task
    from toolorchestra.episodes.pool import DomainRef, TaskPool, ToolUseTask

    ref = DomainRef(name="d", folder=Path("."))

    def task(tid, calls, base=None):
        return ToolUseTask(task=Task(id=tid, user_scenario={"instructions": "x"},
                                     description={"evolved_from": base} if base else None,
                                     evaluation_criteria={"actions": [{"action_id": str(i), "name": "get", "arguments": {"id": c}}
                                                                      for i, c in enumerate(calls)]}), domain=ref)

    pool = TaskPool(qa=[], tool_use=[task("t1", [1]), task("t1-e1", [1, 2], base="t1"), task("t2", [3])])
    held = heldout_pool(pool, train_ids={"d/t1"}, fraction=0.1, seed=0)
    assert [t.id for t in held.tool_use] == ["d/t2"]


def test_stratified_sample_covers_strata_and_is_repeatable(eval_tasks):
    pool = load_pool(eval_tasks)
    from toolorchestra.evaluation.benchmarks import EvalItem

    items = [EvalItem("mix", t) for t in [*pool.qa, *pool.tool_use]]
    strata = {i.stratum for i in items}
    chosen = stratified_sample(items, len(strata), seed=1)
    assert {i.stratum for i in chosen} == strata
    assert [i.key for i in chosen] == [i.key for i in stratified_sample(list(reversed(items)), len(strata), seed=1)]
    assert stratified_sample(items, None, seed=1) == sorted(items, key=lambda i: i.key)


def test_preference_items_cycle_through_kinds(eval_tasks, pairs):
    pool = load_pool(eval_tasks)
    items = preference_items(pool.qa, pairs, benchmark="prefs", n=3, seed=0)
    assert len(items) == 3 and {i.preference.kind for i in items} == {"avoid_tool", "prefer_tool", "cost"}
    with pytest.raises(ConfigError, match="preference eval split is empty"):
        preference_items(pool.qa, [], benchmark="prefs", n=3, seed=0)


def test_build_benchmarks_from_specs(eval_tasks, pairs, tmp_path):
    hle = tmp_path / "hle.jsonl"
    hle.write_text("\n".join(json.dumps(r) for r in HLE_ROWS))
    domain = eval_tasks / "toolscale" / "library"
    specs = [ToolScaleSpec(name="toolscale", max_tasks=2), QASpec(name="qa", max_tasks=2),
             PreferenceSpec(name="prefs", max_tasks=2), QAFileSpec(name="hle", path="hle.jsonl"),
             Tau2Spec(name="tau2", tasks=str(domain / "tasks.json"), domain=str(domain), max_tasks=1)]
    built = build_benchmarks(specs, tasks_root=eval_tasks, workspace=tmp_path, seed=0, preference_pairs=pairs,
                             train_ids=set())
    sizes = {b.name: len(b.items) for b in built}
    assert sizes == {"toolscale": 2, "qa": 2, "prefs": 2, "hle": 2, "tau2": 1}
    assert all(i.preference is not None for i in built[2].items)
    again = build_benchmarks(specs, tasks_root=eval_tasks, workspace=tmp_path, seed=0, preference_pairs=pairs,
                             train_ids=set())
    assert fingerprint(built) == fingerprint(again)
    with pytest.raises(ConfigError, match="names must be unique"):
        build_benchmarks([QASpec(name="qa"), QASpec(name="qa")], tasks_root=eval_tasks, workspace=tmp_path, seed=0)
    with pytest.raises(ConfigError, match="no tasks"):
        build_benchmarks([ToolScaleSpec(name="t", domains=["atlantis"])], tasks_root=eval_tasks, workspace=tmp_path,
                         seed=0, train_ids=set())


def test_two_domains_with_one_name_are_rejected(eval_tasks, tmp_path):
    copy = tmp_path / "other" / "library"
    shutil.copytree(eval_tasks / "toolscale" / "library", copy)
    specs = [ToolScaleSpec(name="toolscale", max_tasks=1),
             Tau2Spec(name="tau2", tasks=str(copy / "tasks.json"), domain=str(copy), max_tasks=1)]
    with pytest.raises(ConfigError, match="two domains are named 'library'"):
        build_benchmarks(specs, tasks_root=eval_tasks, workspace=tmp_path, seed=0, train_ids=set())


def test_preferences_about_tools_not_offered_are_left_out(eval_tasks, pairs, tmp_path):
    spec = [PreferenceSpec(name="prefs", max_tasks=None)]
    every = build_benchmarks(spec, tasks_root=eval_tasks, workspace=tmp_path, seed=0, preference_pairs=pairs,
                             train_ids=set())[0]
    only_answer = build_benchmarks(spec, tasks_root=eval_tasks, workspace=tmp_path, seed=0, preference_pairs=pairs,
                                   train_ids=set(), tools=["ask_direct"])[0]
    assert any("code_interpreter" in i.preference.tools for i in every.items)
    assert all(set(i.preference.tools) <= {"ask_direct"} for i in only_answer.items)
    assert "name tools this evaluation does not offer" in only_answer.notes[0]


def test_training_task_ids_read_the_exported_dataset(eval_tasks, catalog, tmp_path):
    from toolorchestra.episodes.rows import write_hf_dataset
    from toolorchestra.evaluation.benchmarks import training_task_ids
    from toolorchestra.preferences.assemble import AssemblyConfig, assemble

    splits = assemble(load_pool(eval_tasks), catalog, [], [], AssemblyConfig(eval_task_fraction=0.25))
    write_hf_dataset(splits, tmp_path / "datasets" / "hf")
    ids = training_task_ids(tmp_path / "datasets")  # the preferences stage's output folder
    assert ids == {i.task_id for i in splits["train"]}
    assert not ids & {i.task_id for i in splits["eval"]}
    assert training_task_ids(None) is None
    # The checkpoint was chosen on the validation split: those tasks are not held out either.
    splits = assemble(load_pool(eval_tasks), catalog, [], [],
                      AssemblyConfig(eval_task_fraction=0.25, validation_task_fraction=0.3))
    assert splits["validation"]
    write_hf_dataset(splits, tmp_path / "with-validation" / "hf")
    ids = training_task_ids(tmp_path / "with-validation")
    assert ids == {i.task_id for i in splits["train"] + splits["validation"]}


def test_preference_items_leave_out_tickets_the_episode_cannot_finish(eval_tasks, pairs, tmp_path):
    """A ticket longer than the episode's turns is wrong whatever the preference: the 2026-12-06
    demo's preference benchmark held 7 tickets of 3-7 golden calls under max_turns 3."""
    def tickets(**limit):
        spec = [PreferenceSpec(name="prefs", task_kinds=["tool_use"], max_tasks=None, **limit)]
        built = build_benchmarks(spec, tasks_root=eval_tasks, workspace=tmp_path, seed=0, preference_pairs=pairs,
                                 train_ids=set())[0]
        return [len(item.task.task.actions) for item in built.items]

    every = tickets()
    shortest = min(every)
    assert max(every) > shortest  # the fixture holds longer tickets, so the limit has something to drop
    assert tickets(max_actions=shortest) and set(tickets(max_actions=shortest)) == {shortest}


def test_qa_items_bring_their_domains_folder_without_any_ticket(eval_tasks, tmp_path):
    """A count over a domain's records needs its database; before, only tickets brought a domain's
    folder, so `orchestra evaluate --bench qa` ran the code interpreter without the records."""
    from toolorchestra.episodes.pool import task_domain
    from toolorchestra.evaluation.benchmarks import domain_folders

    built = build_benchmarks([QASpec(name="qa", max_tasks=None)], tasks_root=eval_tasks, workspace=tmp_path, seed=0,
                             train_ids=set())
    named = {task_domain(item.task) for item in built[0].items} - {None}
    assert named and not any(item.kind == "tool_use" for item in built[0].items)
    folders = domain_folders(built)
    assert set(folders) == named and all((folders[n] / "db.json").is_file() for n in named)
    # as the flow's params hold them: a tool-use benchmark limited to named domains comes first
    specs = [ToolScaleSpec(name="t", domains=sorted(named), max_tasks=1), QASpec(name="qa", max_tasks=None)]
    built = build_benchmarks(specs, tasks_root=eval_tasks, workspace=tmp_path, seed=0, train_ids=set())
    assert domain_folders(built) == folders
