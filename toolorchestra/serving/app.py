"""The FastAPI application: OpenAI-compatible routes over the orchestrator loop.

Routes: `POST /v1/chat/completions` (see `schemas` for the body and the `orchestra` extension),
`GET /v1/models`, `GET /health` (no auth: for load balancers), `GET /metrics` (Prometheus).
Every route but `/health` needs `Authorization: Bearer <ORCHESTRA_SERVE_TOKEN>` when a token is
configured (compared in constant time). Errors use OpenAI's body `{"error": {"message", "type",
"code"}}`: 400 bad request, 401 token, 404 unknown model, 413 body over `max_body_bytes`, 429
queue full, 503 shutting down, 504 timeout, 500 when the policy itself failed. Validation errors
name the field, never echo the input.

A request becomes an `Episode` queued on its model's `Batcher`; the loop's observers
(`on_turn`, `on_done`) hand each step to the request's asyncio queue, so a streamed response
sends steps as they happen and a plain one returns when its episode ends, not when its batch does.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.concurrency import run_in_threadpool

from toolorchestra.agent.trajectory import Trajectory
from toolorchestra.core.errors import ConfigError
from toolorchestra.serving.batcher import Closed, Job, QueueFull
from toolorchestra.serving.bodies import FINISH, orchestra_summary, sse, step_of, step_text, usage_body
from toolorchestra.serving.config import ServeConfig
from toolorchestra.serving.errors import ApiError, BodyLimit, error_response
from toolorchestra.serving.metrics import ServeMetrics
from toolorchestra.serving.models import ModelPool, ServedModel, UnknownModel
from toolorchestra.serving.preference import combine, vector_instruction
from toolorchestra.serving.schemas import ChatRequest

log = logging.getLogger(__name__)
OnTrajectory = Callable[[Trajectory, dict[str, Any]], None]
"""Called (in a worker thread) with each finished episode and its request's metadata (traces)."""


def create_app(config: ServeConfig, pool: ModelPool, *, on_trajectory: OnTrajectory | None = None,
               metrics: ServeMetrics | None = None) -> FastAPI:
    metrics = metrics or ServeMetrics()
    bearer = HTTPBearer(auto_error=False)
    expected = config.token.get_secret_value().encode() if config.token is not None else None

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        pool.close()

    app = FastAPI(title="ToolOrchestra orchestrator", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.state.metrics, app.state.pool = metrics, pool

    def authorize(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if expected is None:
            return
        given = credentials.credentials.encode() if credentials is not None else b""
        if not secrets.compare_digest(given, expected):
            raise ApiError(401, "invalid or missing bearer token", "invalid_api_key", "authentication_error")

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        metrics.requests.labels(status=str(exc.status)).inc()
        return error_response(exc.status, exc.message, exc.code, exc.kind, headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
                             for e in exc.errors()[:5])
        metrics.requests.labels(status="400").inc()
        return error_response(400, problems, "invalid_request")

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), "http_error")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "models": [s.id for s in pool.loaded()],
                "queue": sum(s.batcher.depth for s in pool.loaded() if s.batcher is not None)}

    @app.get("/metrics", dependencies=[Depends(authorize)])
    async def prometheus() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        metrics.queue.set(sum(s.batcher.depth for s in pool.loaded() if s.batcher is not None))
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict[str, Any]:
        ids = [pool.config.model.removeprefix("models:/")] + [s.id for s in pool.loaded()]
        return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": "orchestra"}
                                           for i in dict.fromkeys(ids)]}

    def preference_for(request: ChatRequest, served: ServedModel) -> tuple[str | None, str | None]:
        options = request.orchestra
        try:
            from_vector = (vector_instruction(options.preference_vector, served.tool_names, served.model_names)
                           if options.preference_vector else None)
        except ConfigError as exc:
            raise ApiError(400, f"orchestra.preference_vector: {exc.reason}", "invalid_preference") from None
        given = combine(request.system_preference(), options.preference, from_vector)
        if given is not None or options.preference_vector is not None:
            return given, "request"
        if served.default_vector:  # the calibrated setting (`orchestra calibrate`), unless overridden
            return vector_instruction(served.default_vector, served.tool_names), "calibrated"
        return None, None

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat_completions(request: ChatRequest) -> Any:
        started = time.perf_counter()
        if len(request.messages) > config.max_messages:
            raise ApiError(400, f"at most {config.max_messages} messages", "too_many_messages")
        try:
            task = request.task_text()
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_messages") from None
        try:
            served = await run_in_threadpool(pool.get, request.model)
        except UnknownModel as exc:
            raise ApiError(404, str(exc), "model_not_found") from None
        preference, source = preference_for(request, served)
        options = request.orchestra
        max_turns = min(options.max_turns or served.max_turns, config.max_turns_limit)
        max_tokens = request.max_completion_tokens or request.max_tokens or served.max_tokens
        episode = served.orchestrator().start(task, preference, max_turns=max_turns, budget_usd=options.budget_usd)
        events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def push(kind: str, payload: Any) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (kind, payload))

        meta = {"model_version": served.registered.ref, "preference_source": source, "trace": options.trace}

        def done(trajectory: Trajectory) -> None:
            push("done", trajectory)
            if on_trajectory is not None:
                on_trajectory(trajectory, meta)

        episode.on_turn = lambda turn: push("turn", turn)
        episode.on_done = done
        job = Job(episode, max_tokens=max_tokens, temperature=request.temperature or 0.0,
                  on_finish=lambda j: push("finished", j))
        try:
            served.batcher.submit(job)
        except QueueFull as exc:
            raise ApiError(429, f"server busy: {exc}; retry later", "queue_full", "rate_limit_error") from None
        except Closed as exc:
            raise ApiError(503, str(exc), "shutting_down", "server_error") from None
        metrics.in_flight.inc()
        deadline = loop.time() + config.request_timeout_s

        async def next_event() -> tuple[str, Any]:
            try:
                return await asyncio.wait_for(events.get(), timeout=max(deadline - loop.time(), 0.001))
            except TimeoutError:
                job.cancel()
                raise ApiError(504, f"no answer within {config.request_timeout_s:g}s", "timeout", "server_error") from None

        def finished(trajectory: Trajectory) -> None:
            metrics.in_flight.dec()
            metrics.latency.observe(time.perf_counter() - started)
            metrics.cost.inc(trajectory.cost_usd)
            metrics.stops.labels(reason=str(trajectory.stop_reason)).inc()
            for model, used in trajectory.tokens.items():
                metrics.tokens.labels(model=model, kind="prompt").inc(used.prompt_tokens)
                metrics.tokens.labels(model=model, kind="completion").inc(used.completion_tokens)

        def outcome(kind: str, payload: Any) -> Trajectory:
            """The finished trajectory, or the error the request gets."""
            if kind == "finished" and payload.failed is not None:
                raise ApiError(500, "the orchestrator failed on this request", "internal_error", "server_error")
            trajectory = episode.trajectory
            if trajectory.stop_reason == "policy_error":
                raise ApiError(500, "the policy model failed: see the server log", "policy_error", "server_error")
            return trajectory

        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if not request.stream:
            try:
                while True:
                    kind, payload = await next_event()
                    if kind in ("done", "finished"):
                        break
                trajectory = outcome(kind, payload)
            except ApiError:
                metrics.in_flight.dec()
                raise
            finished(trajectory)
            metrics.requests.labels(status="200").inc()
            return {"id": completion_id, "object": "chat.completion", "created": created, "model": served.id,
                    "choices": [{"index": 0, "finish_reason": FINISH.get(trajectory.stop_reason or "", "stop"),
                                 "message": {"role": "assistant", "content": trajectory.answer or ""}}],
                    "usage": usage_body(trajectory), "orchestra": orchestra_summary(trajectory, served, source)}

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": served.id,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
            return sse(body)

        async def stream() -> AsyncIterator[str]:
            closed = False
            try:
                yield chunk({"role": "assistant", "content": ""})
                while True:
                    try:
                        kind, payload = await next_event()
                    except ApiError as exc:
                        yield sse({"error": {"message": exc.message, "type": exc.kind, "code": exc.code}})
                        return
                    if kind == "turn":
                        step = step_of(payload)
                        if step is not None:
                            yield chunk({"reasoning_content": step_text(step)}, orchestra={"step": step})
                        continue
                    break
                try:
                    trajectory = outcome(kind, payload)
                except ApiError as exc:
                    yield sse({"error": {"message": exc.message, "type": exc.kind, "code": exc.code}})
                    return
                closed = True
                finished(trajectory)
                metrics.requests.labels(status="200").inc()
                yield chunk({"content": trajectory.answer or ""})
                yield chunk({}, FINISH.get(trajectory.stop_reason or "", "stop"), usage=usage_body(trajectory),
                            orchestra=orchestra_summary(trajectory, served, source))
                yield format_sse_event(data_str="[DONE]").decode()
            finally:
                if not closed:
                    job.cancel()
                    metrics.in_flight.dec()

        return EventSourceResponse(stream(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app
