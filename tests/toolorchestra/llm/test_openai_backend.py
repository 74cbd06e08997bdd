"""The OpenAI backend against a scripted OpenAI-compatible HTTP server on loopback.

The real `openai` client and real HTTP are exercised; only the server's answers are scripted, to
reach the retry, timeout and error paths that a healthy server never shows. (A real model behind a
real server is tested in the cluster-profile integration tests.)
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from toolorchestra.llm.base import LLMError
from toolorchestra.llm.openai_backend import OpenAILLM, to_wire_messages


def ok_body(content="hello", tool_calls=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "c1", "object": "chat.completion", "created": 0, "model": "served-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


class Script:
    def __init__(self, steps):
        self.steps = list(steps)
        self.requests = []


@pytest.fixture
def server():
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append({"body": body, "auth": self.headers.get("Authorization")})
            status, payload, delay = script.steps.pop(0) if script.steps else (200, ok_body(), 0)
            time.sleep(delay)
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield script
    httpd.shutdown()


def make(server, **kw):
    kw.setdefault("backoff_s", 0.01)
    return OpenAILLM("served-model", base_url=server.url, api_key="sk-secret-key-123", **kw)


def test_completion_reports_tokens_latency_and_sends_key(server):
    out = make(server).chat([{"role": "user", "content": "hi"}], max_tokens=5)
    assert out.text == "hello" and out.usage.prompt_tokens == 11 and out.usage.completion_tokens == 3
    assert out.usage.cached_prompt_tokens == 0  # the server reported no cache hits
    assert out.latency_s > 0
    assert server.requests[0]["auth"] == "Bearer sk-secret-key-123"
    assert server.requests[0]["body"]["max_tokens"] == 5
    assert "stop" not in server.requests[0]["body"]


def test_prefix_cache_hits_the_server_reports_are_kept(server):
    body = ok_body()
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 8}  # OpenAI's field; vLLM's with prompt details on
    server.steps.append((200, body, 0))
    out = make(server).chat([{"role": "user", "content": "hi"}], max_tokens=5)
    assert (out.usage.prompt_tokens, out.usage.cached_prompt_tokens) == (11, 8)


def test_stop_strings_go_to_the_server(server):
    make(server).chat([{"role": "user", "content": "hi"}], stop=["\n```\n"])
    assert server.requests[0]["body"]["stop"] == ["\n```\n"]


def test_structured_tool_calls_are_returned(server):
    call = {"id": "call_1", "type": "function", "function": {"name": "answer", "arguments": '{"model": "m"}'}}
    server.steps.append((200, ok_body("", [call]), 0))
    out = make(server).chat([{"role": "user", "content": "hi"}], tools=[{"type": "function", "function": {"name": "answer", "parameters": {}}}])
    assert out.tool_calls[0].name == "answer" and out.tool_calls[0].id == "call_1"
    assert server.requests[0]["body"]["tools"][0]["function"]["name"] == "answer"


def test_retries_on_429_and_5xx_then_succeeds(server):
    err = {"error": {"message": "busy"}}
    server.steps.extend([(429, err, 0), (503, err, 0), (200, ok_body("done"), 0)])
    assert make(server).chat([{"role": "user", "content": "x"}]).text == "done"
    assert len(server.requests) == 3


def test_gives_up_after_attempts_with_clear_error_without_the_key(server):
    err = {"error": {"message": "bad key sk-secret-key-123"}}
    server.steps.extend([(500, err, 0)] * 3)
    with pytest.raises(LLMError, match="failed after 3 attempts") as info:
        make(server, max_attempts=3).chat([{"role": "user", "content": "x"}])
    assert "sk-secret-key-123" not in str(info.value)
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server):
    server.steps.append((400, {"error": {"message": "bad request"}}, 0))
    with pytest.raises(LLMError, match="BadRequestError"):
        make(server).chat([{"role": "user", "content": "x"}])
    assert len(server.requests) == 1


def test_timeout_is_retried_then_reported(server):
    server.steps.extend([(200, ok_body(), 1.0)] * 2)
    started = time.perf_counter()
    with pytest.raises(LLMError, match="APITimeoutError"):
        make(server, timeout_s=0.2, max_attempts=2).chat([{"role": "user", "content": "x"}])
    assert time.perf_counter() - started < 5


def test_unreachable_endpoint_is_an_llm_error():
    llm = OpenAILLM("m", base_url="http://127.0.0.1:9/v1", max_attempts=2, backoff_s=0.01, timeout_s=1)
    with pytest.raises(LLMError, match="APIConnectionError"):
        llm.chat([{"role": "user", "content": "x"}])


def test_text_parsed_tool_results_become_user_tool_responses():
    wire = to_wire_messages([
        {"role": "assistant", "content": "<tool_call>...</tool_call>"},
        {"role": "tool", "content": "42"},
        {"role": "tool", "tool_call_id": "c", "content": "7"},
    ])
    assert wire[1] == {"role": "user", "content": "<tool_response>\n42\n</tool_response>"}
    assert wire[2]["role"] == "tool"


def test_a_hung_server_costs_at_most_max_total_s(server):
    """However many attempts are allowed, a server that never answers is an error after about
    max_total_s (the default is 60 s, not 4 x 60 s as before)."""
    server.steps.extend([(200, ok_body(), 3.0)] * 20)
    started = time.perf_counter()
    with pytest.raises(LLMError, match="APITimeoutError"):
        make(server, timeout_s=1.0, max_attempts=20, max_total_s=1.5).chat([{"role": "user", "content": "x"}])
    assert time.perf_counter() - started < 3.0
    assert OpenAILLM("m").max_total_s == 60.0 and OpenAILLM("m").timeout_s == 30.0


def test_a_batch_goes_out_as_concurrent_requests_with_replies_in_order():
    """`chat_batch` overlaps its requests (a lockstep batch of episodes would otherwise wait one
    round trip per row per turn), up to `max_concurrent`, and returns the replies in row order."""
    state = {"now": 0, "most": 0, "seeds": {}}
    lock = threading.Lock()

    class Echo(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            question = body["messages"][0]["content"]
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
                state["seeds"][question] = body.get("seed")
            time.sleep(0.2)  # long enough for the other requests to arrive while this one is open
            with lock:
                state["now"] -= 1
            data = json.dumps(ok_body(f"answer to {question}")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        batch = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
        replies = OpenAILLM("served-model", base_url=url).chat_batch(batch, max_tokens=5, seed=7)
        assert [r.text for r in replies] == [f"answer to question {i}" for i in range(4)]
        assert state["most"] == 4
        assert state["seeds"] == {f"question {i}": 7 + i for i in range(4)}  # row i samples with seed + i
        state["most"] = 0
        OpenAILLM("served-model", base_url=url, max_concurrent=2).chat_batch(batch, max_tokens=5)
        assert state["most"] == 2
    finally:
        httpd.shutdown()


def test_a_failed_request_in_a_batch_raises_after_the_others_return(server):
    server.steps.extend([(200, ok_body("one"), 0.0), (400, {"error": {"message": "bad request"}}, 0.0),
                         (200, ok_body("three"), 0.0)])
    with pytest.raises(LLMError, match="BadRequestError"):
        make(server).chat_batch([[{"role": "user", "content": f"q{i}"}] for i in range(3)], max_tokens=5)
    assert len(server.requests) == 3  # every request was sent and answered
