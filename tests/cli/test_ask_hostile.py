"""`orchestra ask` against a scripted OpenAI-compatible policy on loopback: the prompt carries the
price sheet of training; a lone surrogate in the model's tool arguments still gives valid `--json`;
a failing policy endpoint is a non-zero exit; an unknown `--tools` name is a one-line error (exit 2),
as is a bad option value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.chat_server import chat_server

from orchestra_cli.main import main

ORCHESTRA = Path(sys.executable).parent / "orchestra"
# A JSON escape of a lone surrogate: valid JSON, but no UTF-8 encoder takes the decoded string.
LONE = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(1)", "note": "\\ud800"}}</tool_call>'


@pytest.fixture
def policy_server() -> Iterator[str]:
    replies = [LONE, "done"]

    with chat_server(lambda headers, body: replies.pop(0) if replies else "done", model="policy",
                     usage=(3, 2)) as url:
        yield url


def write_catalog(folder: Path, base_url: str) -> Path:
    path = folder / "catalog.yaml"
    path.write_text(yaml.safe_dump({
        "policy": "p",
        "models": {"p": {"backend": {"kind": "openai", "model": "policy", "base_url": base_url, "api_key_env": None,
                                     "max_attempts": 1, "timeout_s": 5},
                         "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}},
        "tools": [{"name": "code_interpreter", "kind": "code", "backend": {"type": "code_interpreter"},
                   "price": {"per_call": 0.001}}],
    }))
    return path


def test_a_lone_surrogate_in_tool_arguments_gives_valid_json(policy_server, tmp_path):
    catalog = write_catalog(tmp_path, policy_server)
    proc = subprocess.run([str(ORCHESTRA), "ask", "hi", "--catalog", str(catalog), "--json", "--max-turns", "3"],
                          cwd=tmp_path, capture_output=True, timeout=120, env={**os.environ})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    out = json.loads(proc.stdout.decode("utf-8").strip().splitlines()[-1])  # strict UTF-8: it decodes
    assert out["turns"][0]["arguments"]["note"] == "\ud800" and out["answer"] == "done"


def test_a_failing_policy_endpoint_is_a_non_zero_exit(tmp_path, capsys):
    catalog = write_catalog(tmp_path, "http://127.0.0.1:9/v1")  # nothing listens on port 9
    assert main(["ask", "hi", "--catalog", str(catalog), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip())["stop_reason"] == "policy_error"
    assert "error: the policy failed: policy at http://127.0.0.1:9/v1" in captured.err


def test_an_unknown_tool_is_a_one_line_error(tmp_path, capsys):
    catalog = write_catalog(tmp_path, "http://127.0.0.1:9/v1")
    assert main(["ask", "hi", "--catalog", str(catalog), "--tools", "code_interpreter,nosuch"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: <config>: --tools: nosuch: not in the catalog; its tools: code_interpreter", err


@pytest.mark.parametrize(("option", "value", "says"), [("--engine", "gpu", "'gpu' is not one of"),
                                                       ("--max-turns", "0", "greater than or equal to 1")])
def test_a_bad_option_value_is_a_usage_error_not_a_traceback(option, value, says, capsys):
    # typer >= 0.29 raises its vendored click's exceptions, which the entry point once let through
    assert main(["ask", "hi", option, value]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_ask_shows_the_policy_the_prompt_of_training_with_its_price_sheet(tmp_path, capsys, monkeypatch):
    # Before: `ask` sent the bare system prompt, which no training instance has (every one carries
    # the offered tools' prices), and the demo's champion sent "What is 17 * 23?" to local_search.
    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(tmp_path))
    requests: list[dict] = []

    def reply(headers: dict, body: bytes) -> str:
        requests.append(json.loads(body))
        return "42"

    with chat_server(reply, model="policy", usage=(3, 2)) as url:
        catalog = write_catalog(tmp_path, url)
        assert main(["ask", "What is 6 * 7?", "--catalog", str(catalog), "--no-trace", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["answer"] == "42"
    system = requests[0]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].endswith("\n\nPrices of your tools (USD):\n- code_interpreter: $0.001 per call")


def test_ask_with_a_domain_gives_the_code_interpreter_its_records(tmp_path, capsys, monkeypatch):
    """`--domain FOLDER`: the code tool holds that database (rows/find defined), as a QA episode of
    the domain sees it, so a count over the records is one call; a folder without db.json is exit 2."""
    from toolorchestra.synthesis.domains import load_embedded

    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(tmp_path))
    library = load_embedded("library", seed=0, size=12)
    folder = tmp_path / "library"
    folder.mkdir()
    (folder / "db.json").write_text(json.dumps(library.db))
    program = "print(sum(r['status'] == 'lost' for r in rows('loans')))"
    call = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "%s"}}</tool_call>' % program
    requests: list[dict] = []

    def reply(headers: dict, body: bytes) -> str:
        requests.append(json.loads(body))
        return call if len(requests) == 1 else "the count"

    with chat_server(reply, model="policy", usage=(3, 2)) as url:
        catalog = write_catalog(tmp_path, url)
        assert main(["ask", "How many loans are lost?", "--catalog", str(catalog), "--json", "--no-trace",
                     "--domain", str(folder)]) == 0
    out = json.loads(capsys.readouterr().out.strip())
    lost = sum(1 for loan in library.db["loans"] if loan["status"] == "lost")
    assert out["turns"][0]["observation"].splitlines()[-1] == str(lost)
    [described] = [t["function"]["description"] for t in requests[0]["tools"]]
    assert "The library database is loaded" in described and "Tables: members, books, loans." in described
    assert main(["ask", "hi", "--catalog", str(catalog), "--domain", str(tmp_path)]) == 2
    assert "no db.json" in capsys.readouterr().err
