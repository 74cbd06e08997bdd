"""Stage `promote`: registration, the `challenger` / `champion` aliases, the gate's refusals and
their recorded reasons, the model card, lineage, dry runs, and the full evaluate -> promote path."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.eval_fixtures import make_checkpoint, save_tiny_model, tiny_catalog_data

from stagekit.runner import run_stage
from stagekit.tracking import PARENT_RUN_ENV, configure
from toolorchestra.core.errors import ConfigError
from toolorchestra.core.settings import Settings
from toolorchestra.registry.bundle import weights_sha256
from toolorchestra.registry.store import alias_version, client_for

PROMOTE = {"deps": {"model": "models/orchestrator", "report": "reports/eval"}, "outs": {"card": "reports/promote"},
           "gate": {"accuracy_tolerance": 0.02, "max_cost_ratio": 1.5}}
LOCK = {"schema": "2.0", "stages": {"train": {"cmd": "orchestra stage train",
                                              "outs": [{"path": "models/orchestrator", "md5": "m1.dir"}]}}}


def metrics(acc: float, cost: float) -> dict:
    return {"overall": {"n": 20, "accuracy": acc, "cost_mean": cost, "cost_total": 20 * cost, "latency_mean": 1.0,
                        "format_valid_rate": 1.0, "answered_rate": 1.0, "adherence": None}}


BASELINES = {"prompted": (0.05, 0.001), "random_router": (0.1, 0.01)}


def write_report(root: Path, *, trained: tuple[float, float], champion: tuple[float, float] | None = None,
                 champion_version: str | None = None, baselines: dict | None = None) -> None:
    summary = {"trained": metrics(*trained), "expert:tiny": metrics(0.3, 0.01)}
    summary.update({name: metrics(*values) for name, values in (BASELINES if baselines is None else baselines).items()})
    if champion is not None:
        summary["champion"] = metrics(*champion)
    report = {"fingerprint": "abc", "benchmarks": [{"name": "qa", "kind": "qa", "tasks": 20, "notes": []}],
              "summary": summary, "labels": {}, "candidate": "trained", "judge": {"model": None},
              "weights_sha256": weights_sha256(root / "models" / "orchestrator"), "train_set_known": True,
              "champion": {"method": "champion", "version": champion_version} if champion is not None else None}
    folder = root / "reports" / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(report))


@pytest.fixture(scope="module")
def tracking(tmp_path_factory) -> Path:
    """One MLflow store for the module (creating a SQLite store costs seconds); each test registers
    its own model name."""
    return tmp_path_factory.mktemp("mlflow")


@pytest.fixture
def workspace(tmp_path, tiny_llm, tracking, request, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_MLFLOW__TRACKING_URI", f"sqlite:///{tracking / 'mlflow.db'}")
    monkeypatch.setenv("ORCHESTRA_MLFLOW__ARTIFACT_ROOT", (tracking / "artifacts").as_uri())
    PROMOTE["registered_model"] = request.node.name.removeprefix("test_")[:40]
    tiny = save_tiny_model(tiny_llm, tmp_path / "tiny")
    data = tiny_catalog_data(tiny)
    data["tools"] = [t for t in data["tools"] if t["name"] == "code_interpreter"]
    (tmp_path / "catalog.json").write_text(json.dumps(data))
    checkpoint(tmp_path, tiny_llm, perturb=0.0)
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(LOCK))
    write_params(tmp_path, {})
    return tmp_path


def checkpoint(root: Path, tiny_llm, perturb: float) -> Path:
    data = json.loads((root / "catalog.json").read_text()) if (root / "catalog.json").exists() else None
    return make_checkpoint(tiny_llm, root / "models" / "orchestrator", base_model=root / "tiny", catalog_data=data,
                           perturb=perturb)


def write_params(root: Path, extra: dict) -> None:
    section = {**PROMOTE, **extra}
    (root / "params.yaml").write_text(yaml.safe_dump({"promote": section}, sort_keys=False))


def settings_of(root: Path) -> Settings:
    return Settings(workspace=root, state_dir=root / ".orchestra")  # MLflow: the module's store (environment)


@contextlib.contextmanager
def flow_parent(settings: Settings):
    """A finished flow-level MLflow run that stage runs attach to, as in a real flow, where each
    stage runs in its own process (`ORCHESTRA_PARENT_RUN_ID`) while the flow's run is open."""
    import mlflow

    experiment = configure(settings)
    with mlflow.start_run(experiment_id=experiment, run_name="retrain", tags={"orchestra.flow": "retrain"}) as run:
        if (settings.workspace / "dvc.lock").exists():
            mlflow.log_artifact(str(settings.workspace / "dvc.lock"))
    os.environ[PARENT_RUN_ENV] = run.info.run_id
    try:
        yield run
    finally:
        os.environ.pop(PARENT_RUN_ENV, None)


def promote(root: Path) -> dict:
    settings = settings_of(root)
    with flow_parent(settings):
        run_stage("promote", params_file=root / "params.yaml", settings=settings)
    return json.loads((root / "reports" / "promote" / "decision.json").read_text())


def version_of(root: Path, alias: str):
    return alias_version(client_for(settings_of(root)), PROMOTE["registered_model"], alias)


def test_first_promotion_without_champion_registers_champion_with_card_and_lineage(workspace):
    from flows.report import card_markdown
    from stagekit.lineage import lineage

    write_report(workspace, trained=(0.4, 0.002))
    assert card_markdown(workspace) is None  # nothing promoted yet: nothing for the flow to publish
    decision = promote(workspace)
    assert decision["decision"] == "promoted" and decision["version"] == "1"
    published = card_markdown(workspace)
    assert published.startswith(f"**Gate: promoted** — {PROMOTE['registered_model']} version 1; first promotion")
    assert published.endswith((workspace / "reports" / "promote" / "model_card.md").read_text())
    assert decision["reasons"][0] == "first promotion: there is no champion yet"
    champion, challenger = version_of(workspace, "champion"), version_of(workspace, "challenger")
    assert str(champion.version) == str(challenger.version) == "1"
    assert champion.tags["orchestra.gate.decision"] == "promoted"
    assert champion.tags["orchestra.weights_sha256"] == weights_sha256(workspace / "models" / "orchestrator")
    assert champion.description.startswith(f"# {PROMOTE['registered_model']} v1") and "`m1.dir`" in champion.description
    card = (workspace / "reports" / "promote" / "model_card.md").read_text()
    assert "Gate decision: **promoted to champion**" in card
    info = lineage(f"models:/{PROMOTE['registered_model']}@champion", settings_of(workspace))
    assert info["model"]["version"] in (1, "1") and info["run"]["stage"] == "promote"
    assert info["flow_run"]["flow"] == "retrain"
    assert any(o["md5"] == "m1.dir" for s in info["stages"] for o in s["outs"])


def test_first_promotion_of_a_model_that_solves_nothing_is_refused_plainly(workspace):
    from flows.report import card_markdown, promotion_line

    # Before: the first promotion had only floors, and a 0%-accuracy model became champion.
    write_report(workspace, trained=(0.0, 0.0))
    decision = promote(workspace)  # the stage succeeds: a refusal is not a failure
    assert decision["decision"] == "rejected" and decision["version"] == "1"
    assert decision["summary"].startswith("not promoted: trained solved no task: 0.0% [0.0, 16.1] on 20 tasks; "
                                          "trained 0.0% [0.0, 16.1] does not beat prompted 5.0% [0.9, 23.6]")
    assert {c["name"] for c in decision["checks"] if not c["passed"]} == {
        "solves_tasks", "beats:prompted", "beats:random_router"}
    assert version_of(workspace, "champion") is None and str(version_of(workspace, "challenger").version) == "1"
    published = card_markdown(workspace)
    assert published.startswith(f"**Not promoted** — {PROMOTE['registered_model']} version 1 stays `challenger`. "
                                "not promoted: trained solved no task")
    assert promotion_line(workspace) == (False, f"promote: {decision['summary']} (version 1, it stays challenger)")
    card = (workspace / "reports" / "promote" / "model_card.md").read_text()
    assert "failed: trained 0.0% [0.0, 16.1] does not beat random_router 10.0% [2.8, 30.1]" in card


def test_a_baseline_missing_from_the_report_refuses_with_the_reason(workspace):
    write_report(workspace, trained=(0.6, 0.002), baselines={"prompted": (0.05, 0.001)})
    decision = promote(workspace)
    assert decision["decision"] == "rejected" and version_of(workspace, "champion") is None
    assert "failed: baseline random_router is not in the evaluation: run it (evaluate.methods) or drop it from " \
           "promote.gate.baselines" in decision["reasons"]
    write_params(workspace, {"gate": {**PROMOTE["gate"], "baselines": ["prompted"]}})
    assert promote(workspace)["decision"] == "promoted"  # a gate that names only what was evaluated


def test_gate_refusals_are_registered_as_challenger_with_reasons(workspace, tiny_llm):
    write_report(workspace, trained=(0.6, 0.004))
    assert promote(workspace)["version"] == "1"  # champion v1: accuracy 0.6, cost 0.004

    checkpoint(workspace, tiny_llm, perturb=0.01)  # a different model
    write_report(workspace, trained=(0.5, 0.002), champion=(0.6, 0.004), champion_version="1")
    less_accurate = promote(workspace)
    assert less_accurate["decision"] == "rejected" and less_accurate["version"] == "2"
    assert str(version_of(workspace, "champion").version) == "1"
    assert str(version_of(workspace, "challenger").version) == "2"
    tags = client_for(settings_of(workspace)).get_model_version(PROMOTE["registered_model"], "2").tags
    assert tags["orchestra.gate.decision"] == "rejected"
    assert "failed: accuracy 0.500 vs champion 0.600" in tags["orchestra.gate.reasons"]

    checkpoint(workspace, tiny_llm, perturb=0.02)
    write_report(workspace, trained=(0.7, 0.0065), champion=(0.6, 0.004), champion_version="1")
    too_expensive = promote(workspace)
    assert too_expensive["decision"] == "rejected" and any("failed: mean cost" in r for r in too_expensive["reasons"])
    assert str(version_of(workspace, "champion").version) == "1"

    write_report(workspace, trained=(0.9, 0.001), champion=(0.6, 0.004), champion_version="7")  # stale evaluation
    stale = promote(workspace)
    assert stale["decision"] == "rejected" and "re-run the evaluate stage" in " ".join(stale["reasons"])

    # better than the champion but not than the random router: refused on every promotion, not only the first
    write_report(workspace, trained=(0.61, 0.005), champion=(0.6, 0.004), champion_version="1",
                 baselines={"prompted": (0.05, 0.001), "random_router": (0.65, 0.01)})
    below_router = promote(workspace)
    assert below_router["decision"] == "rejected" and str(version_of(workspace, "champion").version) == "1"
    assert [c["name"] for c in below_router["checks"] if not c["passed"]] == ["beats:random_router"]

    write_report(workspace, trained=(0.61, 0.005), champion=(0.6, 0.004), champion_version="1")
    better = promote(workspace)
    assert better["decision"] == "promoted" and str(version_of(workspace, "champion").version) == better["version"]


def test_dry_run_and_identical_weights_register_nothing(workspace):
    write_report(workspace, trained=(0.4, 0.002))
    write_params(workspace, {"dry_run": True})
    dry = promote(workspace)
    assert dry["decision"] == "promoted" and dry["version"] is None and version_of(workspace, "champion") is None
    write_params(workspace, {})
    assert promote(workspace)["version"] == "1"
    identical = promote(workspace)  # the champion already has these weights
    assert identical["decision"] == "identical" and identical["version"] is None
    assert str(version_of(workspace, "challenger").version) == "1"


def test_report_of_other_weights_is_refused(workspace, tiny_llm):
    write_report(workspace, trained=(0.4, 0.002))
    checkpoint(workspace, tiny_llm, perturb=0.05)
    with pytest.raises(ConfigError, match="re-run the evaluate stage"):
        run_stage("promote", params_file=workspace / "params.yaml", settings=settings_of(workspace), track=False)


@pytest.mark.slow  # two evaluate + promote cycles with MLflow: ~30 s on two cores
def test_evaluate_then_promote_compares_with_the_re_evaluated_champion(workspace, tiny_llm):
    from helpers.eval_fixtures import write_tasks_folder

    write_tasks_folder(workspace / "data" / "validated", tasks=8, qa=6)
    evaluate = {"deps": {"model": "models/orchestrator", "tasks": "data/validated"}, "outs": {"report": "reports/eval"},
                "benchmarks": [{"name": "qa", "kind": "qa", "max_tasks": 2}],
                "methods": {"prompted": False, "experts": [], "random_router": False},
                "episode": {"max_turns": 1, "max_tokens": 8}, "registered_model": PROMOTE["registered_model"]}
    params = {"evaluate": evaluate, "promote": PROMOTE}
    (workspace / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    settings = settings_of(workspace)

    def cycle() -> tuple[dict, dict]:
        with flow_parent(settings):
            run_stage("evaluate", params_file=workspace / "params.yaml", settings=settings)
            run_stage("promote", params_file=workspace / "params.yaml", settings=settings)
        report = json.loads((workspace / "reports" / "eval" / "metrics.json").read_text())
        return report, json.loads((workspace / "reports" / "promote" / "decision.json").read_text())

    # A tiny random model solves nothing, so the gate would never make it champion: the first
    # champion comes from a written report, then a real evaluate -> promote cycle compares with it.
    write_report(workspace, trained=(0.6, 0.004))
    with flow_parent(settings):
        run_stage("promote", params_file=workspace / "params.yaml", settings=settings)
    assert str(version_of(workspace, "champion").version) == "1"
    shutil.rmtree(workspace / "reports" / "eval")  # the evaluate stage replaces only what it wrote itself
    checkpoint(workspace, tiny_llm, perturb=0.01)
    report, second = cycle()
    assert report["champion"]["version"] == "1" and set(report["summary"]) == {"trained", "champion"}
    assert second["champion_version_before"] == "1" and second["version"] == "2"
    assert second["champion"]["accuracy"] == report["summary"]["champion"]["overall"]["accuracy"]
    reasons = " ".join(second["reasons"])
    assert "vs champion" in reasons and "mean cost" in reasons
    expected = "champion" if second["decision"] == "promoted" else "challenger"
    assert str(version_of(workspace, expected).version) == "2"


def test_cli_dry_run_shows_the_decision_and_registers_nothing(workspace, monkeypatch):
    from typer.testing import CliRunner

    from orchestra_cli.main import app

    write_report(workspace, trained=(0.4, 0.002))
    result = CliRunner().invoke(app, ["promote", "--dry-run", "--params", str(workspace / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert "first promotion: there is no champion yet" in result.output
    assert "promoted to champion: trained 40.0% [21.9, 61.3] beats prompted 5.0% [0.9, 23.6]" in result.output
    assert "dry run: would be promoted" in result.output
    write_report(workspace, trained=(0.0, 0.0))
    result = CliRunner().invoke(app, ["promote", "--dry-run", "--params", str(workspace / "params.yaml")])
    assert result.exit_code == 0, result.output
    assert "not promoted: trained solved no task" in result.output and "dry run: would be rejected" in result.output
    assert version_of(workspace, "champion") is None and not (workspace / "reports" / "promote").exists()
