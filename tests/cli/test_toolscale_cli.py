"""`orchestra synthesize` / `orchestra validate` through typer's CliRunner and the real entry point."""

from __future__ import annotations

import json
import os

import pytest
from helpers.third_party import third_party
from typer.testing import CliRunner

from orchestra_cli.main import app, main

runner = CliRunner()


@pytest.fixture(autouse=True)
def in_tmp_workspace(tmp_path, monkeypatch):
    """Output folders must lie inside the workspace: the current folder here (no project above it)."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith("ORCHESTRA_")]:
        monkeypatch.delenv(key)


def test_synthesize_then_validate_an_embedded_domain(tmp_path):
    out = tmp_path / "library"
    result = runner.invoke(app, ["synthesize", "--domain", "library", "--out", str(out), "--tasks", "12", "--seed", "4"])
    assert result.exit_code == 0, result.output
    assert "library:" in result.output and "12 tasks" in result.output
    assert {"db.json", "policy.md", "tools.json", "tasks.json", "qa.jsonl"} <= {p.name for p in out.iterdir()}
    result = runner.invoke(app, ["validate", "--domain", str(out), "--report", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.output.splitlines()[0].split(": ", 1)[1])
    assert counts["input"] == 12 and counts["kept"] == 12 and "dropped_replay_error" in counts
    assert "validation suite passed" in result.output
    assert (tmp_path / "report/data_docs/index.html").exists()
    assert len(json.loads((out / "validated/library/tasks.json").read_text())) == 12

    failing = runner.invoke(app, ["validate", "--domain", str(out), "--max-actions", "1"])
    assert failing.exit_code == 1
    assert "validation suite FAILED" in failing.output and "column=n_actions" in failing.output


def test_synthesize_a_vendored_domain_folder(tmp_path):
    source = third_party("toolscale", "restaurant")
    result = runner.invoke(app, ["synthesize", "--domain", str(source), "--out", str(tmp_path / "r"), "--tasks", "50"])
    assert result.exit_code == 0, result.output
    assert len(json.loads((tmp_path / "r/tasks.json").read_text())) == 50
    assert (tmp_path / "r/policy.md").read_text() == (source / "policy.md").read_text()


def test_bad_domain_is_a_one_line_error(tmp_path, capsys):
    assert main(["synthesize", "--domain", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not a domain folder nor an embedded domain" in err and "Traceback" not in err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "db.json").write_text('{"users": 5}')
    assert main(["synthesize", "--domain", str(tmp_path / "bad"), "--out", str(tmp_path / "o")]) == 2
    assert "db.json: $.users: table is an integer" in capsys.readouterr().err


def test_output_folders_outside_the_workspace_or_files_are_one_line_errors(tmp_path, capsys):
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    assert main(["synthesize", "--domain", "library", "--out", str(outside), "--tasks", "2"]) == 2
    assert "--out: output path" in capsys.readouterr().err and not outside.exists()
    (tmp_path / "a_file").write_text("x")
    assert main(["synthesize", "--domain", "library", "--out", "a_file", "--tasks", "2"]) == 2
    err = capsys.readouterr().err
    assert "--out: a_file is a file; expected a folder" in err and "Traceback" not in err
    assert main(["synthesize", "--domain", "library", "--out", "lib", "--tasks", "2", "--qa", "0"]) == 0
    capsys.readouterr()
    assert main(["validate", "--domain", "lib", "--report", "a_file"]) == 2
    assert "--report: a_file is a file" in capsys.readouterr().err
    assert main(["validate", "--domain", "lib", "--report", str(outside)]) == 2
    assert "--report: output path" in capsys.readouterr().err and not outside.exists()
    assert main(["validate", "--domain", "nosuch"]) == 2
    assert "--domain: not a domain folder" in capsys.readouterr().err
