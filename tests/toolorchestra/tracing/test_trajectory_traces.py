"""A trajectory becomes an MLflow trace: spans per policy turn and per tool call, redacted."""

from __future__ import annotations

import pytest

from toolorchestra.agent.loop import Orchestrator
from toolorchestra.llm.base import LLM, Completion, Usage
from toolorchestra.llm.hermes import format_tool_call
from toolorchestra.tools.base import Tool, ToolOutput
from toolorchestra.tools.catalog import Price
from toolorchestra.tools.toolbox import Toolbox
from toolorchestra.tracing.redact import REDACTED, redact
from toolorchestra.tracing.trajectory import log_trajectory_trace


class Echo(Tool):
    name, description = "echo", "repeats its text"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    def run(self, arguments):
        return ToolOutput(content=f"echo: {arguments['text']}")


class TwoTurns(LLM):
    model = "two-turns"

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        usage = Usage(prompt_tokens=50, completion_tokens=5)
        if messages[-1]["role"] == "tool":
            return Completion(text="done", usage=usage)
        return Completion(text=format_tool_call("echo", {"text": messages[-1]["content"]}), usage=usage)


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("traces", artifact_location=(tmp_path / "artifacts").as_uri())
    yield experiment
    mlflow.set_tracking_uri(None)


def test_one_trace_with_a_span_per_turn_and_tool_call_linked_to_the_run(tracking, monkeypatch):
    import mlflow

    monkeypatch.setenv("EXAMPLE_API_KEY", "very-secret-value-123")
    orchestrator = Orchestrator(TwoTurns(), Toolbox([Echo()], prices={"echo": Price(per_call=0.25)}),
                                policy_price=Price(input_per_mtok=1.0, output_per_mtok=2.0))
    trajectory = orchestrator.run("say very-secret-value-123 and Bearer abcdefghijklmnop")
    with mlflow.start_run(experiment_id=tracking) as run:
        pass
    trace_id = log_trajectory_trace(trajectory, run_id=run.info.run_id, experiment_id=tracking,
                                    tags={"orchestra.kind": "test"})
    assert trace_id is not None
    traces = mlflow.search_traces(run_id=run.info.run_id, locations=[tracking], return_type="list")
    assert [t.info.trace_id for t in traces] == [trace_id]
    trace = traces[0]
    names = [s.name for s in trace.data.spans]
    assert names == ["orchestra.episode", "policy turn 0", "tool echo", "policy turn 1"]
    root, turn0, tool, turn1 = trace.data.spans
    assert root.outputs["answer"] == "done" and root.attributes["cost_usd"] == pytest.approx(trajectory.cost_usd)
    assert root.attributes["tokens"] == {"two-turns": {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}}
    assert turn0.attributes["mlflow.chat.tokenUsage"]["input_tokens"] == 50 and turn0.parent_id == root.span_id
    assert tool.attributes["cost_usd"] == 0.25 and tool.attributes["ok"] is True
    assert tool.start_time_ns >= turn0.end_time_ns - 1_000_000 and turn1.start_time_ns >= tool.start_time_ns
    assert trace.info.tags["orchestra.kind"] == "test"
    text = trace.to_json()
    assert "very-secret-value-123" not in text and "abcdefghijklmnop" not in text and REDACTED in text


def test_redaction_shapes():
    assert redact("Authorization: Bearer abcdefghij123", []) == f"Authorization: {REDACTED}"
    assert redact('{"api_key": "hunter22hunter"}', []) == f'{{"api_key": "{REDACTED}"}}'
    assert redact("sk-" + "a" * 30, []) == REDACTED
    assert redact("the token budget is fine", []) == "the token budget is fine"


def test_a_failing_backend_does_not_raise(monkeypatch):
    import mlflow

    def broken(*args, **kwargs):
        raise RuntimeError("tracking server down")

    monkeypatch.setattr(mlflow, "start_span_no_context", broken)
    assert log_trajectory_trace(Orchestrator(TwoTurns(), Toolbox([Echo()])).run("x")) is None
