"""`orchestra serve-model`: the registered orchestrator behind an OpenAI-compatible HTTP API."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestra_cli.app import ENGINE_HELP, Engine, app, err_console


@app.command("serve-model")
def serve_model(
    model: Annotated[str, typer.Option(help="registered model: models:/NAME@ALIAS or models:/NAME/VERSION")]
    = "models:/orchestrator@champion",
    host: Annotated[str, typer.Option(help="address to bind; beyond loopback needs ORCHESTRA_SERVE_TOKEN")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535)] = 8000,
    max_batch: Annotated[int, typer.Option(min=1, help="episodes per lockstep batch")] = 16,
    batch_window_ms: Annotated[float, typer.Option(min=0.0, help="how long a batch waits for more requests")] = 10.0,
    max_queue: Annotated[int, typer.Option(min=1, help="waiting requests before 429")] = 64,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds a request may take before 504")] = 300.0,
    trace_sample_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of requests logged as MLflow traces")] = 0.0,
    engine: Annotated[Engine, typer.Option(help=ENGINE_HELP)] = Engine.auto,
) -> None:
    """Serve MODEL: POST /v1/chat/completions, GET /v1/models, /health, /metrics."""
    import uvicorn

    from toolorchestra.core.settings import load_settings
    from toolorchestra.serving.config import TOKEN_ENV, ServeConfig, check_exposure, token_from_env
    from toolorchestra.serving.server import build_app

    config = ServeConfig(model=model, host=host, port=port, token=token_from_env(), max_batch=max_batch,
                         batch_window_ms=batch_window_ms, max_queue=max_queue, request_timeout_s=timeout,
                         trace_sample_rate=trace_sample_rate, engine=engine.value)
    check_exposure(config)
    settings = load_settings()
    application, served = build_app(config, settings)
    auth = f"bearer token from {TOKEN_ENV}" if config.auth else f"no auth ({TOKEN_ENV} not set): loopback only"
    err_console.print(f"serving {served.registered.ref} ({model}) on http://{host}:{port}/v1 - {auth}",
                      highlight=False, soft_wrap=True)
    uvicorn.run(application, host=host, port=port, log_level="info", server_header=False)
