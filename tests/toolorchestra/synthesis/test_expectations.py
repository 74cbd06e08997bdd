"""Great Expectations suites: pass on good tables, list failing expectations, write Data Docs."""

from __future__ import annotations

import pytest
from helpers.domains import events_db

from toolorchestra.core.errors import OrchestraError
from toolorchestra.envs.domain import Domain
from toolorchestra.envs.domain_tools import DomainEnv
from toolorchestra.synthesis.expectations import qa_rows, raise_on_failure, run_suites, task_rows
from toolorchestra.synthesis.procedural import synthesize_tasks
from toolorchestra.synthesis.qa import synthesize_qa


def test_suites_pass_then_fail_with_listed_expectations(tmp_path):
    domain = Domain("events", events_db())
    env = DomainEnv(domain)
    tasks, _ = synthesize_tasks(domain, 15, seed=1)
    rows = task_rows("events", tasks, env)
    qa = qa_rows(synthesize_qa(domain, 10, seed=1))
    ok = run_suites({"tasks": rows, "qa": qa}, tmp_path / "docs", min_tasks=10, min_qa=5, min_tasks_per_domain=15)
    assert ok["tasks"].success and ok["qa"].success and ok["tasks"].evaluated == 9
    raise_on_failure(ok)
    assert (tmp_path / "docs" / "index.html").exists()
    assert list((tmp_path / "docs").rglob("validations/**/*.html"))

    bad_rows = [dict(r) for r in rows]
    bad_rows[1]["key"] = bad_rows[0]["key"]
    bad_rows[2]["replay_ok"] = False
    bad_rows[3]["unknown_tools"] = 1
    bad_qa = [dict(q) for q in qa]
    bad_qa[0]["answer_type"] = "essay"
    bad = run_suites({"tasks": bad_rows, "qa": bad_qa}, tmp_path / "docs2", max_actions=2, min_tasks_per_domain=20)
    assert not bad["tasks"].success and not bad["qa"].success
    text = "\n".join(bad["tasks"].failures + bad["qa"].failures)
    for expected in ("expect_column_values_to_be_unique(column=key)", "column=replay_ok",
                     "column=unknown_tools", "column=n_actions", "column=domain_tasks", "column=answer_type"):
        assert expected in text
    with pytest.raises(OrchestraError, match=r"validation suite failed:\n  tasks: expect_column"):
        raise_on_failure(bad)
