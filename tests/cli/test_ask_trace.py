"""`orchestra ask` logs its trajectory as an MLflow trace and honours a cost budget."""

from __future__ import annotations

import json

from helpers.eval_fixtures import save_tiny_model


def test_ask_is_one_trace_in_the_ask_experiment(tiny_llm, tmp_path, monkeypatch, capsys):
    import mlflow
    from mlflow import MlflowClient

    from orchestra_cli.main import main

    model = save_tiny_model(tiny_llm, tmp_path / "tiny")
    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    try:
        code = main(["ask", "What is 2 + 2?", "--policy", str(model), "--tools", "code_interpreter",
                     "--max-turns", "2", "--max-tokens", "8", "--json"])
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 0 and out["trace_id"]
        client = MlflowClient(f"sqlite:///{tmp_path / '.orchestra' / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("orchestra-ask")
        traces = client.search_traces(locations=[experiment.experiment_id])
        assert [t.info.trace_id for t in traces] == [out["trace_id"]]
        assert sum(s.name.startswith("policy turn") for s in traces[0].data.spans) == len(out["turns"])
        code = main(["ask", "What is 2 + 2?", "--policy", str(model), "--tools", "code_interpreter",
                     "--budget", "0", "--no-trace", "--json"])
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert code == 0 and out["stop_reason"] == "budget" and out["cost_usd"] == 0 and out["trace_id"] is None
    finally:
        mlflow.set_tracking_uri(None)
