"""A scripted OpenAI-compatible chat endpoint on 127.0.0.1 for tests of the HTTP backends."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def chat_server(reply: Callable[[dict, bytes], str], *, model: str = "m",
                usage: tuple[int, int] = (1, 1)) -> Iterator[str]:
    """Serve `/v1/chat/completions`: each POST is answered with `reply(headers, body)` as the
    assistant message (headers lower-cased); yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            content = reply({k.lower(): v for k, v in self.headers.items()}, body)
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": model,
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": content}}],
                               "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                         "total_tokens": sum(usage)}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
