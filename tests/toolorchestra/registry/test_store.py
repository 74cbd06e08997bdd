"""Logging, registering and loading the orchestrator with MLflow (temporary SQLite store)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from toolorchestra.core.errors import OrchestraError
from toolorchestra.registry import store
from toolorchestra.registry.bundle import weights_sha256
from toolorchestra.registry.policy import load_policy, load_registered


@pytest.fixture(scope="module")
def registered(module_mlflow_settings, checkpoint):
    """One registered version shared by this module's tests (logging takes seconds)."""
    import mlflow

    settings = module_mlflow_settings
    client = store.client_for(settings)
    experiment = mlflow.create_experiment("test", artifact_location=settings.artifact_root)
    with mlflow.start_run(experiment_id=experiment) as run:
        version = store.log_orchestrator(checkpoint, name="orchestrator", settings=settings,
                                         tags={"orchestra.weights_sha256": weights_sha256(checkpoint)})
    return client, version, run.info.run_id


def test_logged_version_points_at_its_run_and_carries_both_flavours(registered, module_mlflow_settings):
    mlflow_settings = module_mlflow_settings
    client, version, run_id = registered
    assert str(version.version) == "1" and version.run_id == run_id  # lineage follows run_id
    assert store.alias_version(client, "orchestrator", store.CHAMPION) is None
    store.set_alias(client, "orchestrator", store.CHALLENGER, version.version)
    assert str(store.alias_version(client, "orchestrator", store.CHALLENGER).version) == "1"
    folder, found = store.download("models:/orchestrator@challenger", mlflow_settings)
    assert str(found.version) == "1" and (folder / "MLmodel").is_file()
    artifacts = store.artifact_paths(folder)
    weights = artifacts["transformers"]
    assert "transformers:" in (weights / "MLmodel").read_text()  # a standalone transformers model
    assert (weights / "model" / "model.safetensors").is_file()
    requirements = (folder / "requirements.txt").read_text()
    assert "mlflow==" in requirements and "torch==" in requirements
    import mlflow

    components = mlflow.transformers.load_model(str(weights), return_type="components")
    assert components["tokenizer"].chat_template  # the tools-aware template travels with the weights


def test_decision_is_recorded_on_the_version(registered):
    client, version, _ = registered
    store.record_decision(client, "orchestrator", version.version,
                          tags={"orchestra.gate.decision": "rejected", "orchestra.gate.reasons": "failed: accuracy"},
                          card="# card\n" + "x" * 6000)
    got = client.get_model_version("orchestrator", version.version)
    assert got.tags["orchestra.gate.decision"] == "rejected"
    assert got.tags["orchestra.gate.reasons"] == "failed: accuracy"
    assert got.description.startswith("# card") and len(got.description) <= store.MAX_DESCRIPTION
    assert "full card is the run artifact" in got.description


def test_load_policy_for_orchestra_ask(registered, module_mlflow_settings, checkpoint):
    mlflow_settings = module_mlflow_settings
    client, version, _ = registered
    store.set_alias(client, "orchestrator", store.CHAMPION, version.version)
    llm, price, catalog = load_policy("models:/orchestrator@champion", mlflow_settings)
    assert price.input_per_mtok == 0.5 and [t.name for t in catalog.tools] == ["code_interpreter"]
    reply = llm.chat([{"role": "user", "content": "hi"}], max_tokens=4)
    assert reply.usage.prompt_tokens > 0
    model = load_registered("models:/orchestrator/1", mlflow_settings)
    assert model.manifest["weights_sha256"] == weights_sha256(checkpoint) and "champion" in model.aliases
    with pytest.raises(OrchestraError, match="cannot resolve"):
        load_policy("models:/orchestrator@nobody", mlflow_settings)
    with pytest.raises(OrchestraError, match="use models:/NAME@ALIAS"):
        load_policy("models:/orchestrator", mlflow_settings)


def test_a_registered_policy_on_llamacpp_never_loads_its_weights_into_torch(registered, module_mlflow_settings,
                                                                             monkeypatch):
    """`ask` and the server on a CPU: the GGUF is converted from the bundle once and found again by
    the manifest's weights hash; before, every start loaded, re-saved and hashed the weights."""
    import mlflow

    from toolorchestra.llm import gguf_export

    mlflow_settings = module_mlflow_settings
    first = load_registered("models:/orchestrator/1", mlflow_settings, engine="llamacpp")
    assert type(first.llm).__name__ == "LlamaCppLLM" and first.llm.model == "orchestrator/v1"
    gguf = first.llm.gguf_file
    assert gguf.name.startswith(f"bundle-{first.manifest['weights_sha256'][:10]}")
    greedy = first.llm.chat([{"role": "user", "content": "hi"}], max_tokens=6, temperature=0.0)
    first.llm.close()

    def refused(*args, **kwargs):
        raise AssertionError("loaded into torch, converted or hashed again")

    monkeypatch.setattr(mlflow.transformers, "load_model", refused)
    monkeypatch.setattr(gguf_export, "convert", refused)
    monkeypatch.setattr(gguf_export, "weights_sha256", refused)
    again = load_registered("models:/orchestrator/1", mlflow_settings, engine="llamacpp")
    assert again.llm.gguf_file == gguf
    assert again.llm.chat([{"role": "user", "content": "hi"}], max_tokens=6, temperature=0.0).text == greedy.text
    again.llm.close()


def test_log_outside_a_run_is_refused(mlflow_settings, checkpoint):
    with pytest.raises(OrchestraError, match="inside an MLflow run"):
        store.log_orchestrator(checkpoint, name="orchestrator", settings=mlflow_settings)


FRESH = """
import json, sys
import mlflow
import pandas as pd
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model("models:/orchestrator@challenger")
out = model.predict(pd.DataFrame({"question": ["What is 2 + 2?", "Name a colour."],
                                  "preference": ["Keep it cheap.", None]}), params={"max_turns": 2, "max_tokens": 8})
broke = model.predict(pd.DataFrame({"question": ["What is 2 + 2?"]}), params={"budget_usd": 0.0})
import toolorchestra
print(json.dumps({"rows": out.to_dict(orient="records"), "code": toolorchestra.__file__,
                  "budget": broke.to_dict(orient="records")}))
"""


@pytest.mark.slow  # a fresh interpreter imports torch, transformers and MLflow: ~20 s on two cores
def test_pyfunc_loads_in_a_fresh_process_and_answers(registered, module_mlflow_settings, tmp_path):
    mlflow_settings = module_mlflow_settings
    client, version, _ = registered
    store.set_alias(client, "orchestrator", store.CHALLENGER, version.version)
    env = {**os.environ, "ORCHESTRA_STATE_DIR": str(tmp_path / "serving-state"),
           "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    proc = subprocess.run([sys.executable, "-c", FRESH, mlflow_settings.tracking_uri], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = result["rows"]
    assert len(rows) == 2
    for row in rows:
        assert row["stop_reason"] in ("final_message", "answer_tool", "max_turns")
        assert row["turns"] >= 1 and row["cost_usd"] > 0 and json.loads(row["trajectory"])["turns"]
    assert "Keep it cheap." in json.loads(rows[0]["trajectory"])["preference"]
    assert "/code/toolorchestra/" in result["code"]  # the model's own copy of the package ran
    [broke] = result["budget"]  # a zero budget: the loop makes no call at all
    assert broke["stop_reason"] == "budget" and broke["cost_usd"] == 0 and broke["turns"] == 0


def test_a_registered_policy_sees_observations_cut_as_in_its_training(tmp_path):
    """`ask`, the server and the pyfunc cut tool results at the manifest's training limit: a
    lookup's five search passages shown whole distracted the demo's champion into a wrong record."""
    from toolorchestra.core.settings import Settings
    from toolorchestra.registry.policy import observation_chars
    from toolorchestra.tools.catalog import load_embedded_catalog
    from toolorchestra.tools.toolbox import MAX_OBSERVATION_CHARS, build_toolbox

    assert observation_chars({"episode": {"max_observation_chars": 400}}) == 400
    assert observation_chars({}) == observation_chars({"episode": {"max_observation_chars": "x"}}) == MAX_OBSERVATION_CHARS
    settings = Settings(workspace=tmp_path, state_dir=tmp_path / ".orchestra")
    box = build_toolbox(load_embedded_catalog(), settings, only=["code_interpreter"], max_observation_chars=400)
    result = box.call("code_interpreter", {"code": "print('x' * 2000)"})
    assert 400 <= len(result.observation) < 600
