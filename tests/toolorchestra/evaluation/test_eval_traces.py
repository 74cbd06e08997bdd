"""An evaluation run in MLflow has one trace per episode, with its spans and verdict."""

from __future__ import annotations

from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.episodes.environment import EpisodeConfig
from toolorchestra.evaluation import methods as m
from toolorchestra.evaluation.benchmarks import QASpec, ToolScaleSpec, build_benchmarks
from toolorchestra.evaluation.runner import EvalConfig, evaluate
from toolorchestra.evaluation.traces import EpisodeTracer


def test_every_episode_is_a_trace_of_the_evaluation_run(eval_tasks, catalog, settings, tmp_path, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("eval", artifact_location=(tmp_path / "artifacts").as_uri())
    benchmarks = build_benchmarks([ToolScaleSpec(name="toolscale", max_tasks=2), QASpec(name="qa", max_tasks=2)],
                                  tasks_root=eval_tasks, workspace=eval_tasks, seed=0, train_ids=set())
    expert = ScriptedLLM("42", model="smollm2")
    methods = [m.random_router(catalog, seed=0, max_turns=2), *m.expert_methods(catalog, lambda alias: expert)]
    config = EvalConfig(episode=EpisodeConfig(max_turns=2, max_tokens=8), batch_size=4)
    try:
        with mlflow.start_run(experiment_id=experiment) as run:
            tracer = EpisodeTracer.for_active_run()
            result = evaluate(methods, benchmarks, catalog=catalog, settings=settings, config=config,
                              llm_for=lambda alias: expert, on_episode=tracer)
        traces = MlflowClient(uri).search_traces(locations=[experiment], run_id=run.info.run_id, max_results=100)
    finally:
        mlflow.set_tracking_uri(None)
    assert len(result.records) == 8 and len(traces) == len(result.records) == len(set(tracer.trace_ids))
    seen = {(t.info.tags["orchestra.method"], t.info.tags["orchestra.task"]) for t in traces}
    assert seen == {(r.method, r.task_id) for r in result.records}
    by_id = {t.info.trace_id: t for t in traces}
    for record, trace_id in zip(result.records, tracer.trace_ids, strict=True):
        trace = by_id[trace_id]
        spans = trace.data.spans
        assert trace.info.tags["orchestra.correct"] == str(record.correct).lower()
        assert sum(s.name.startswith("policy turn") for s in spans) == record.turns
        assert sum(s.name.startswith("tool ") for s in spans) == sum(record.tool_calls.values())
        assert spans[0].attributes["cost_usd"] == record.cost_usd
