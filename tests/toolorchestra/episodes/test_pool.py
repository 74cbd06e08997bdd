"""Loading the validated task pool: QA files, domain task lists, categories, sampling."""

from __future__ import annotations

import json

import pytest

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.pool import QAItem, load_pool, qa_category, task_prompt


def test_pool_finds_qa_and_tool_use_tasks(validated):
    pool = load_pool(validated)
    assert len(pool.qa) == 8 and len(pool.tool_use) == 6
    by = pool.by_category()
    assert {i.id for i in by["qa_numeric"]} == {"qa-n1", "qa-n2", "qa-n3", "qa-n4"}
    assert {i.id for i in by["qa_lookup"]} == {"qa-l1", "qa-l2", "qa-l3", "qa-l4"}
    task = pool.tool_use[0]
    assert task.id == "shop/shop_1" and task.required_tools == ["get_customer_details"]
    assert "C1" in task_prompt(task.task)
    assert task.domain.policy.startswith("Only tell")


def test_sampling_is_seeded_and_bounded(validated):
    pool = load_pool(validated)
    a, b = pool.sample(2, seed=3), pool.sample(2, seed=3)
    assert [x.id for x in a["qa_lookup"]] == [x.id for x in b["qa_lookup"]]
    assert a["qa_arithmetic"] == []  # this pool has no calculations
    assert all(len(v) == 2 for k, v in a.items() if k != "qa_arithmetic")
    assert len(pool.sample(100, seed=0)["tool_use"]) == 6
    seeds = {tuple(x.id for x in pool.sample(2, seed=s)["tool_use"]) for s in range(8)}
    assert len(seeds) > 1


@pytest.mark.parametrize(("row", "category"), [
    ({"category": "lookup", "answer": "5"}, "qa_lookup"),
    ({"category": "arithmetic", "answer": "5"}, "qa_arithmetic"),
    ({"category": "count", "answer": "5"}, "qa_numeric"),
    ({"category": None, "answer_type": "numeric", "answer": "x"}, "qa_numeric"),
    ({"answer_type": "exactMatch", "answer": "12"}, "qa_lookup"),
    ({"answer": "12.5"}, "qa_numeric"),
    ({"answer": "Lima"}, "qa_lookup"),
])
def test_qa_category(row, category):
    assert qa_category(QAItem(id="q", question="?", **row)) == category


def test_tasks_without_db_use_the_domains_root(tmp_path, validated):
    only_tasks = tmp_path / "v2" / "shop"
    only_tasks.mkdir(parents=True)
    (only_tasks / "tasks.json").write_text((validated / "shop" / "tasks.json").read_text())
    with pytest.raises(ConfigError, match="no db.json"):
        load_pool(tmp_path / "v2")
    assert len(load_pool(tmp_path / "v2", domains_root=validated).tool_use) == 6


def test_broken_files_name_file_and_line(tmp_path):
    (tmp_path / "qa.jsonl").write_text(json.dumps({"id": "a", "question": "q", "answer": 1}) + "\n"
                                       + json.dumps({"id": "b", "question": "", "answer": 1}) + "\n")
    with pytest.raises(ConfigError, match=r"qa.jsonl: line 2: question"):
        load_pool(tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_pool(tmp_path / "missing")


def test_duplicate_qa_ids_are_rejected(tmp_path):
    row = json.dumps({"id": "a", "question": "q", "answer": 1}) + "\n"
    (tmp_path / "one.jsonl").write_text(row)
    (tmp_path / "two.jsonl").write_text(row)
    with pytest.raises(ConfigError, match="'a' also appears"):
        load_pool(tmp_path)
