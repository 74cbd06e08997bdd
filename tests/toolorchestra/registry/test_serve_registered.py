"""`orchestra serve-model` on a registered version: the tiny random-weight model of SmolLM2's
architecture, logged and registered in a throw-away MLflow store, served over loopback."""

from __future__ import annotations

import openai
import pytest

from toolorchestra.registry import store
from toolorchestra.registry.bundle import weights_sha256


@pytest.fixture(scope="module")
def champion(module_mlflow_settings, checkpoint):
    import mlflow

    settings = module_mlflow_settings
    client = store.client_for(settings)
    experiment = mlflow.create_experiment("serve", artifact_location=settings.artifact_root)
    with mlflow.start_run(experiment_id=experiment):
        version = store.log_orchestrator(checkpoint, name="orchestrator", settings=settings,
                                         tags={"orchestra.weights_sha256": weights_sha256(checkpoint)})
    store.set_alias(client, "orchestrator", store.CHAMPION, version.version)
    client.set_model_version_tag("orchestrator", version.version, "orchestra.calibration.cost_weight", "0.5")
    return settings, version


def test_the_registered_champion_answers_through_the_openai_client(champion):
    from toolorchestra.serving.config import ServeConfig
    from toolorchestra.serving.server import BackgroundServer, build_app

    settings, version = champion
    app, served = build_app(ServeConfig(token="t0ken", max_turns_limit=2), settings)
    assert served.id == f"orchestrator/{version.version}" and served.tool_names == ["code_interpreter"]
    # engine auto on a CPU: the registered weights, converted once, run on llama.cpp
    assert type(served.registered.llm).__name__ == "LlamaCppLLM"
    assert "code_interpreter" in served.system_prompt  # the training prompt carries the price sheet
    with BackgroundServer(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="t0ken", max_retries=0, timeout=120)
        reply = api.chat.completions.create(model="orchestrator@champion", messages=[
            {"role": "user", "content": "What is 17 * 23?"}], max_tokens=8)
        by_version = api.chat.completions.create(model=str(version.version), messages=[
            {"role": "user", "content": "hi"}], max_tokens=4, extra_body={"orchestra": {"max_turns": 1}})
        with pytest.raises(openai.NotFoundError):
            api.chat.completions.create(model="orchestrator@nobody", messages=[{"role": "user", "content": "hi"}])
    extra = reply.model_extra["orchestra"]
    assert reply.model == served.id and extra["model_version"] == f"models:/orchestrator/{version.version}"
    # the random-weight policy writes something; what matters is the real path: tokens priced at the catalog's rate
    policy_tokens = extra["tokens"][served.registered.llm.model]
    assert reply.usage.prompt_tokens >= policy_tokens["prompt_tokens"] > 0
    assert extra["cost_usd"] >= (policy_tokens["prompt_tokens"] * 0.5) / 1e6
    assert extra["preference_source"] == "calibrated" and "keeping the bill low" in extra["preference"]
    assert len(extra["trajectory"]["turns"]) <= 2 and by_version.model == served.id


def test_calibrate_records_the_choice_and_the_server_uses_it(champion, tmp_path, monkeypatch, capsys):
    import json

    from mlflow import MlflowClient

    from orchestra_cli.main import main
    from toolorchestra.serving.config import ServeConfig
    from toolorchestra.serving.server import build_app

    settings, version = champion
    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(settings.workspace))
    monkeypatch.setenv("ORCHESTRA_STATE_DIR", str(settings.state))
    monkeypatch.setenv("ORCHESTRA_MLFLOW__TRACKING_URI", settings.tracking_uri)
    monkeypatch.setenv("ORCHESTRA_MLFLOW__ARTIFACT_ROOT", settings.artifact_root)
    tasks = tmp_path / "calibration.jsonl"
    tasks.write_text("\n".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)})
                               for i in range(3)))
    code = main(["calibrate", "--budget", "1", "--tasks", str(tasks), "--max-tasks", "2", "--weights", "0,2",
                 "--max-turns", "1", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["tasks"] == 2 and [p["cost_weight"] for p in out["curve"]] == [0, 2]
    assert all(p["meets_budget"] and p["mean_cost_usd"] > 0 for p in out["curve"])
    chosen = out["chosen"]["cost_weight"]
    client = MlflowClient(settings.tracking_uri)
    tags = client.get_model_version("orchestrator", version.version).tags
    assert float(tags["orchestra.calibration.cost_weight"]) == chosen and tags["orchestra.calibration.run_id"] == out["run_id"]
    run = client.get_run(out["run_id"])
    assert run.data.params["budget_usd"] == "1.0" and "accuracy_lost" in run.data.metrics
    _, served = build_app(ServeConfig(), settings)
    assert served.default_vector == ({"cost": chosen} if chosen > 0 else {})
    assert main(["calibrate", "--budget", "0", "--tasks", str(tasks), "--max-tasks", "1", "--weights", "0",
                 "--max-turns", "1"]) == 1
    assert "no setting meets $0 per task" in capsys.readouterr().err


@pytest.mark.slow  # a fresh `orchestra` process imports torch, transformers and MLflow: ~20 s on two cores
def test_orchestra_serve_model_command_starts_and_answers(champion, tmp_path):
    import os
    import socket
    import subprocess
    import sys
    import time
    from pathlib import Path

    import httpx

    settings, version = champion
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ORCHESTRA_WORKSPACE": str(settings.workspace), "ORCHESTRA_STATE_DIR": str(settings.state),
           "ORCHESTRA_MLFLOW__TRACKING_URI": settings.tracking_uri}
    env.pop("ORCHESTRA_SERVE_TOKEN", None)
    command = [str(Path(sys.executable).parent / "orchestra"), "serve-model", "--port", str(port)]
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and server.poll() is None:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.5)
            api = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
            reply = api.chat.completions.create(model="orchestrator", max_tokens=8,
                                                messages=[{"role": "user", "content": "What is 2 + 2?"}])
        finally:
            server.terminate()
            server.wait(30)
    text = log.read_text()
    assert "no auth (ORCHESTRA_SERVE_TOKEN not set): loopback only" in text, text[-2000:]
    assert f"serving models:/orchestrator/{version.version}" in text
    assert reply.model == f"orchestrator/{version.version}" and reply.model_extra["orchestra"]["cost_usd"] > 0
