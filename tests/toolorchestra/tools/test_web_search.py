"""WebSearch against a real HTTP server on 127.0.0.1 that answers like Tavily's /search.

Each test scripts the server's answers (status, JSON body, delay) and reads back the requests it
received, so retries, parsing, error observations and key handling are checked over real HTTP.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from toolorchestra.tools.base import ToolError
from toolorchestra.tools.web_search import WebSearch, WebSearchConfig

KEY_ENV = "TEST_TAVILY_KEY"
SECRET = "tvly-dev-s3cr3t-0123456789"

TAVILY_OK = {
    "query": "capital of France",
    "answer": None,
    "images": [],
    "results": [
        {"title": "Paris - Wikipedia", "url": "https://en.wikipedia.org/wiki/Paris",
         "content": "Paris is the capital and largest city of France.", "score": 0.98, "raw_content": None},
        {"title": "France facts", "url": "https://example.org/france",
         "content": "France's capital city is Paris. " * 60, "score": 0.71},
        {"title": "Third", "url": "https://example.org/3", "content": "extra", "score": 0.2},
    ],
    "response_time": 1.05,
}


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0


@dataclass
class FakeTavily:
    url: str
    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)



@pytest.fixture(autouse=True)
def approved_test_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test variables may be sent to the loopback servers (see core/secrets.py)."""
    monkeypatch.setenv("ORCHESTRA_CREDENTIAL_HOSTS", json.dumps({name: ["127.0.0.1"] for name in [KEY_ENV]}))

@pytest.fixture
def tavily() -> Iterator[FakeTavily]:
    state = FakeTavily(url="", replies=[])

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            state.requests.append({"path": self.path, "headers": dict(self.headers),
                                   "json": json.loads(self.rfile.read(length) or b"null")})
            reply = state.replies.pop(0) if state.replies else Reply(500, {"detail": {"error": "no reply"}})
            if reply.delay_s:
                state.release.wait(reply.delay_s)  # a hanging server; set() at teardown frees it
            payload = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll interval keeps shutdown() (and so each teardown) fast.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def make_tool(url: str, **overrides: Any) -> WebSearch:
    settings = {"base_url": url, "api_key_env": KEY_ENV, "timeout_s": 2.0, "max_attempts": 3,
                "backoff_initial_s": 0.01, "backoff_max_s": 0.05, **overrides}
    return WebSearch(WebSearchConfig(**settings))


def test_parses_results_and_sends_the_request_tavily_expects(tavily: FakeTavily, key: str) -> None:
    tavily.replies = [Reply(200, TAVILY_OK)]
    out = make_tool(tavily.url, max_content_chars=100).run({"query": " capital of France ", "max_results": 2})

    assert out.ok
    assert [r["url"] for r in out.data["results"]] == ["https://en.wikipedia.org/wiki/Paris",
                                                      "https://example.org/france"]
    assert out.data["results"][0]["score"] == pytest.approx(0.98)
    assert "[1] Paris - Wikipedia" in out.content
    assert "URL: https://en.wikipedia.org/wiki/Paris" in out.content
    assert "Third" not in out.content  # trimmed to max_results even if the server sends more
    assert " ..." in out.content  # long snippet cut to max_content_chars
    (request,) = tavily.requests
    assert request["path"] == "/search"
    assert request["headers"]["Authorization"] == f"Bearer {key}"
    assert request["json"]["query"] == "capital of France"
    assert request["json"]["max_results"] == 2
    assert request["json"]["search_depth"] == "basic"
    assert "api_key" not in request["json"]  # the key travels in the header only


def test_answer_is_shown_and_empty_results_are_said(tavily: FakeTavily, key: str) -> None:
    tavily.replies = [Reply(200, {**TAVILY_OK, "answer": "Paris."}),
                      Reply(200, {"query": "x", "results": []})]
    tool = make_tool(tavily.url, include_answer=True)
    first = tool.run({"query": "capital of France"})
    assert "Answer (from the search engine): Paris." in first.content
    assert tavily.requests[0]["json"]["include_answer"] is True
    second = tool.run({"query": "zzqx nothing"})
    assert second.content == "No web results for 'zzqx nothing'."
    assert second.data["results"] == []


def test_429_then_200_is_retried(tavily: FakeTavily, key: str, caplog: pytest.LogCaptureFixture) -> None:
    tavily.replies = [Reply(429, {"detail": {"error": "rate limited"}}), Reply(200, TAVILY_OK)]
    with caplog.at_level(logging.WARNING):
        out = make_tool(tavily.url).run({"query": "capital of France"})
    assert len(tavily.requests) == 2
    assert out.data["results"][0]["title"] == "Paris - Wikipedia"
    assert "HTTP 429" in caplog.text
    assert key not in caplog.text


def test_persistent_500_gives_up_without_leaking_the_key(
    tavily: FakeTavily, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A server that echoes the key back in its error body: the tool must still not repeat it.
    tavily.replies = [Reply(500, {"detail": {"error": f"boom, your key was {key}"}})] * 3
    with caplog.at_level(logging.DEBUG), pytest.raises(ToolError) as info:
        make_tool(tavily.url).run({"query": "q"})
    message = str(info.value)
    assert len(tavily.requests) == 3
    assert "after 3 attempts" in message and "HTTP 500" in message
    assert "boom" in message and "***" in message
    assert key not in message
    assert key not in caplog.text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_client_errors_are_not_retried(tavily: FakeTavily, key: str) -> None:
    tavily.replies = [Reply(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})]
    with pytest.raises(ToolError, match=rf"refused \(HTTP 401\).*{KEY_ENV}.*invalid API key") as info:
        make_tool(tavily.url).run({"query": "q"})
    assert len(tavily.requests) == 1
    assert key not in str(info.value)

    tavily.replies = [Reply(400, {"detail": {"error": "Invalid topic"}})]
    with pytest.raises(ToolError, match="HTTP 400.*Invalid topic"):
        make_tool(tavily.url).run({"query": "q"})
    assert len(tavily.requests) == 2


def test_hanging_server_times_out_and_is_retried(tavily: FakeTavily, key: str) -> None:
    tavily.replies = [Reply(200, TAVILY_OK, delay_s=5.0), Reply(200, TAVILY_OK, delay_s=5.0)]
    with pytest.raises(ToolError, match=r"timed out after 0.3 s \(2 attempts\)") as info:
        make_tool(tavily.url, timeout_s=0.3, max_attempts=2).run({"query": "q"})
    assert len(tavily.requests) == 2
    assert key not in str(info.value)


def test_unreachable_endpoint(key: str) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ToolError, match=r"could not reach .* after 2 attempts \(ConnectError\)"):
        make_tool(f"http://127.0.0.1:{port}", max_attempts=2).run({"query": "q"})


def test_malformed_answers(tavily: FakeTavily, key: str) -> None:
    tavily.replies = [Reply(200, {"query": "q"}), Reply(200, ["not", "an", "object"])]
    tool = make_tool(tavily.url)
    with pytest.raises(ToolError, match="no `results` list"):
        tool.run({"query": "q"})
    with pytest.raises(ToolError, match="not a JSON object"):
        tool.run({"query": "q"})


def test_without_a_key_nothing_is_sent(tavily: FakeTavily, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    expected = f"web search is not configured: set the environment variable {KEY_ENV}"
    with pytest.raises(ToolError, match=expected):
        make_tool(tavily.url).run({"query": "q"})
    assert tavily.requests == []


@pytest.mark.parametrize(
    "arguments",
    [{}, {"query": "  "}, {"query": "q", "max_results": 0}, {"query": "q", "max_results": 11},
     {"query": "q", "max_results": True}],
)
def test_bad_arguments(tavily: FakeTavily, key: str, arguments: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match="web_search"):
        make_tool(tavily.url).run(arguments)
    assert tavily.requests == []


def test_spec_schema() -> None:
    spec = WebSearch(WebSearchConfig(max_results_limit=7)).spec()
    assert spec["function"]["name"] == "web_search"
    params = spec["function"]["parameters"]
    assert params["required"] == ["query"]
    assert params["properties"]["max_results"]["maximum"] == 7
