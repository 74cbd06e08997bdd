"""The OpenAI-compatible server, driven by the official `openai` client over loopback HTTP."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
from helpers.serve_fixtures import Calculator

QUESTION = [{"role": "user", "content": "What is 17 * 23?"}]


def client(url, token="none", **kw):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=60, **kw)


def test_answer_with_usage_cost_and_trajectory(serve):
    with serve() as (url, served):
        reply = client(url).chat.completions.create(model="orchestrator", messages=QUESTION)
        models = client(url).models.list()
    assert reply.choices[0].message.content == "391" and reply.choices[0].finish_reason == "stop"
    assert reply.model == "orchestrator/1" and [m.id for m in models.data][-1] == "orchestrator/1"
    extra = reply.model_extra["orchestra"]
    trajectory = extra["trajectory"]
    assert [t["tool"] for t in trajectory["turns"]] == ["code_interpreter", None]
    assert "391" in trajectory["turns"][0]["observation"]
    # usage: both policy turns (the code interpreter uses no tokens); cost: tokens at the policy's price + the call
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (400, 40, 440)
    assert reply.usage.prompt_tokens_details.cached_tokens == 150  # OpenAI's field for prefix-cache hits
    # cache hits are reported, not discounted: every prompt token costs the input price
    assert extra["cost_usd"] == pytest.approx((400 * 1.0 + 40 * 2.0) / 1e6 + 0.0001)
    assert extra["tokens"] == {"calculator": {"prompt_tokens": 400, "completion_tokens": 40, "cached_prompt_tokens": 150}}
    assert extra["stop_reason"] == "final_message" and extra["model_version"] == "models:/orchestrator/1"


def test_streaming_sends_steps_as_they_happen_then_the_answer(serve):
    with serve() as (url, _):
        chunks = list(client(url).chat.completions.create(model="orchestrator", messages=QUESTION, stream=True))
    deltas = [c.choices[0].delta for c in chunks]
    steps = [d.model_extra.get("reasoning_content") for d in deltas if d.model_extra.get("reasoning_content")]
    assert len(steps) == 1 and steps[0].startswith('[call code_interpreter] {"code": "print(17 * 23)"}')
    assert "[observation]" in steps[0] and "391" in steps[0]
    contents = [d.content for d in deltas if d.content]
    assert contents == ["391"]  # the answer comes after the step, alone in `content`
    step_index = next(i for i, d in enumerate(deltas) if d.model_extra.get("reasoning_content"))
    answer_index = next(i for i, d in enumerate(deltas) if d.content)
    assert step_index < answer_index
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and last.usage.total_tokens == 440
    assert last.model_extra["orchestra"]["trajectory"]["answer"] == "391"
    assert chunks[step_index].model_extra["orchestra"]["step"]["tool"] == "code_interpreter"


def test_bearer_token_is_required_and_never_echoed(serve):
    secret = "s3cr3t-token-value"
    with serve(token=secret) as (url, _):
        with pytest.raises(openai.AuthenticationError) as wrong:
            client(url, token="wrong").chat.completions.create(model="orchestrator", messages=QUESTION)
        ok = client(url, token=secret).chat.completions.create(model="orchestrator", messages=QUESTION)
        missing = httpx.get(f"{url}/v1/models")
        health = httpx.get(f"{url}/health")
        metrics = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {secret}"})
    assert wrong.value.status_code == 401 and secret not in wrong.value.response.text
    assert wrong.value.response.json()["error"]["code"] == "invalid_api_key"
    assert missing.status_code == 401 and health.status_code == 200 and health.json()["models"] == ["orchestrator/1"]
    assert ok.choices[0].message.content == "391"
    assert 'orchestra_requests_total{status="401"} 2.0' in metrics.text
    assert 'orchestra_requests_total{status="200"} 1.0' in metrics.text and secret not in metrics.text


def test_a_tiny_budget_stops_within_it_and_says_why(serve):
    with serve() as (url, served):
        first = served.orchestrator().start(QUESTION[0]["content"])
        prompt = served.registered.llm.count_prompt_tokens(first.messages, first.specs)
        # room for the first turn (its prompt bound + 64 output tokens) and its call, not for a second turn
        budget = (prompt * 1.0 + 64 * 2.0) / 1e6 + 0.0001 + 1e-6
        reply = client(url).chat.completions.create(model="orchestrator", messages=QUESTION,
                                                    extra_body={"orchestra": {"budget_usd": budget}})
        zero = client(url).chat.completions.create(model="orchestrator", messages=QUESTION,
                                                   extra_body={"orchestra": {"budget_usd": 0.0}})
    extra = reply.model_extra["orchestra"]
    assert extra["stop_reason"] == "budget" and extra["cost_usd"] <= budget and extra["budget_usd"] == budget
    assert reply.choices[0].finish_reason == "length" and "budget" in extra["reason"]
    assert "391" in reply.choices[0].message.content  # the best answer so far: the program's output
    assert zero.model_extra["orchestra"]["cost_usd"] == 0.0 and zero.usage.total_tokens == 0


def test_concurrent_requests_share_batched_generations(serve):
    policy = Calculator()
    questions = [f"What is {i} * 3?" for i in range(8)]
    with serve(policy, batch_window_ms=200, max_batch=8) as (url, _):
        api = client(url)
        with ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(lambda q: api.chat.completions.create(
                model="orchestrator", messages=[{"role": "user", "content": q}]), questions))
    assert [r.choices[0].message.content for r in replies] == [str(i * 3) for i in range(8)]
    assert max(policy.batches) > 1 and sum(policy.batches) == 16  # two turns each, fewer generations


def test_full_queue_gets_429_and_a_slow_request_504(serve):
    gate = threading.Event()
    with serve(Calculator(gate), max_batch=1, max_queue=1, batch_window_ms=0, request_timeout_s=3) as (url, served):
        api = client(url)
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(api.chat.completions.create, model="orchestrator", messages=QUESTION)
            while not served.batcher.running:  # the first one is in its batch, held by the gate
                time.sleep(0.01)
            waiting = pool.submit(api.chat.completions.create, model="orchestrator", messages=QUESTION)
            while served.batcher.depth < 1:  # the second one waits in the queue
                time.sleep(0.01)
            with pytest.raises(openai.RateLimitError) as busy:
                api.chat.completions.create(model="orchestrator", messages=QUESTION)
            with pytest.raises(openai.APIStatusError) as slow:
                running.result()
            gate.set()
            waiting.exception()
    assert busy.value.status_code == 429 and "retry later" in busy.value.message
    assert slow.value.status_code == 504


def test_preferences_from_the_request_and_the_calibrated_default(serve):
    policy = Calculator()
    with serve(policy, default_vector={"cost": 1.0}) as (url, _):
        api = client(url)
        default = api.chat.completions.create(model="orchestrator", messages=QUESTION)
        vector = api.chat.completions.create(model="orchestrator", messages=QUESTION, extra_body={
            "orchestra": {"preference_vector": {"latency": 2.0, "calls/code_interpreter": 1.0}, "max_turns": 1}})
        text = api.chat.completions.create(model="orchestrator", messages=[
            {"role": "system", "content": "Keep my data local."}, *QUESTION])
        with pytest.raises(openai.BadRequestError) as bad:
            api.chat.completions.create(model="orchestrator", messages=QUESTION,
                                        extra_body={"orchestra": {"preference_vector": {"calls/nope": 1.0}}})
    assert default.model_extra["orchestra"]["preference_source"] == "calibrated"
    assert default.model_extra["orchestra"]["preference"] == "I care a lot about keeping the bill low."
    extra = vector.model_extra["orchestra"]
    assert extra["preference"] == "More than accuracy, I care about getting an answer quickly. Please use code_interpreter."
    assert extra["stop_reason"] == "max_turns" and len(extra["trajectory"]["turns"]) == 1
    assert text.model_extra["orchestra"]["preference"] == "Keep my data local."
    assert any("User preference: Keep my data local." in m[1]["content"] for m in policy.prompts)
    assert "calls/nope" in bad.value.message


def test_bad_requests_get_clear_openai_style_errors(serve):
    with serve(max_body_bytes=2048) as (url, _):
        api = client(url)
        big = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 5000}]})
        with pytest.raises(openai.NotFoundError) as unknown:
            api.chat.completions.create(model="someone-else@champion", messages=QUESTION)
        invalid = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "robot", "content": "hi"}]})
        empty = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "assistant", "content": "hi"}]})
    assert big.status_code == 413 and big.json()["error"]["code"] == "body_too_large"
    assert unknown.value.status_code == 404 and "serves versions of 'orchestrator' only" in unknown.value.message
    assert invalid.status_code == 400 and "messages.0.role" in invalid.json()["error"]["message"]
    assert empty.status_code == 400 and "user message" in empty.json()["error"]["message"]
    assert json.dumps(invalid.json()).count("robot") == 0  # the input is not echoed


def test_no_token_refuses_a_non_loopback_host(monkeypatch, capsys):
    from orchestra_cli.main import main
    from toolorchestra.serving.config import ServeConfig, check_exposure

    monkeypatch.delenv("ORCHESTRA_SERVE_TOKEN", raising=False)
    assert main(["serve-model", "--host", "0.0.0.0"]) == 2
    assert "ORCHESTRA_SERVE_TOKEN is not set" in capsys.readouterr().err
    check_exposure(ServeConfig(host="::1"))
    check_exposure(ServeConfig(host="0.0.0.0", token="x"))


def test_served_requests_become_traces_when_sampled_or_asked(serve, settings, monkeypatch):
    import random

    from mlflow import MlflowClient

    from toolorchestra.serving.config import ServeConfig
    from toolorchestra.serving.server import trace_sampler

    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    sampler = trace_sampler(ServeConfig(trace_sample_rate=0.5), settings, rng=random.Random(0))
    with serve(on_trajectory=sampler) as (url, _):
        api = client(url)
        asked = api.chat.completions.create(model="orchestrator", messages=QUESTION,
                                            extra_body={"orchestra": {"trace": True}})
        for _ in range(6):
            api.chat.completions.create(model="orchestrator", messages=QUESTION)
        api.chat.completions.create(model="orchestrator", messages=QUESTION, extra_body={"orchestra": {"trace": False}})
    tracking = MlflowClient(settings.tracking_uri)
    experiment = tracking.get_experiment_by_name("orchestra-serve").experiment_id
    traces = tracking.search_traces(locations=[experiment], max_results=50)
    rolls = random.Random(0)
    expected = 1 + sum(rolls.random() < 0.5 for _ in range(6))  # the asked one, then the sampled ones
    assert len(traces) == expected and asked.choices[0].message.content == "391"
    assert {t.info.tags["orchestra.model_version"] for t in traces} == {"models:/orchestrator/1"}
