"""OpenAI-shaped errors and the request-size limit of the server."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    """An error the client gets in OpenAI's shape, with its HTTP status."""

    def __init__(self, status: int, message: str, code: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.kind = status, message, code, kind


def error_response(status: int, message: str, code: str, kind: str = "invalid_request_error",
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status,
                        headers=headers)


class BodyLimit:
    """413 for a request body over `limit` bytes, declared or streamed (pure ASGI middleware)."""

    class _TooLarge(Exception):
        pass

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_large = error_response(413, f"request body over {self.limit} bytes", "body_too_large")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await too_large(scope, receive, send)
            return
        received = 0

        async def limited() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyLimit._TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except BodyLimit._TooLarge:
            await too_large(scope, receive, send)
