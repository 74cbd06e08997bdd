"""The repository's `mlflow/` folder never shadows the MLflow library, and its saved searches are valid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
FOLDER = REPO / "mlflow"


def test_import_mlflow_from_the_repository_root_imports_the_library():
    assert FOLDER.is_dir() and not list(FOLDER.rglob("__init__.py"))
    script = "import mlflow, sys; print(mlflow.__file__); print(hasattr(mlflow, 'start_run'))"
    for cwd in (REPO, FOLDER.parent):
        out = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120,
                             env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
        assert out.returncode == 0, out.stderr
        path, has_api = out.stdout.split()
        assert has_api == "True" and not Path(path).resolve().is_relative_to(FOLDER.resolve())


def test_saved_searches_run_against_an_mlflow_store(tmp_path):
    from mlflow import MlflowClient

    searches = yaml.safe_load((FOLDER / "comparisons.yaml").read_text())
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    ids = {}
    for entry in [*searches["runs"].values(), *searches["traces"].values()]:
        name = entry["experiment"]
        if name not in ids:
            ids[name] = client.create_experiment(name, artifact_location=(tmp_path / name).as_uri())
    evaluations = searches["runs"]["evaluations"]
    for accuracy in (0.25, 0.75):
        run = client.create_run(ids[evaluations["experiment"]], tags={"orchestra.stage": "evaluate"})
        client.log_metric(run.info.run_id, "accuracy", accuracy)
        client.log_metric(run.info.run_id, "cost_mean", 0.01)
    client.create_run(ids[evaluations["experiment"]], tags={"orchestra.stage": "train"})
    for key, entry in searches["runs"].items():
        found = client.search_runs([ids[entry["experiment"]]], filter_string=entry["filter"], order_by=entry["order_by"])
        assert entry["description"] and entry["columns"], key
        if key == "evaluations":
            assert [r.data.metrics["accuracy"] for r in found] == [0.75, 0.25]
    for entry in searches["traces"].values():
        client.search_traces(locations=[ids[entry["experiment"]]], filter_string=entry["filter"])


def test_the_server_script_keeps_secrets_off_its_command_line():
    script = (FOLDER / "server.sh").read_text()
    assert "export MLFLOW_BACKEND_STORE_URI" in script and "--backend-store-uri" not in script
    assert "@DATABASE_URI@" in (FOLDER / "basic_auth.ini").read_text()
    assert subprocess.run(["sh", "-n", str(FOLDER / "server.sh")]).returncode == 0
