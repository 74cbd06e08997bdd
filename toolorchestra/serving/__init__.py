"""Serving the registered orchestrator behind an OpenAI-compatible HTTP API (`orchestra serve-model`).

`config` (limits, auth), `schemas` (the request body), `bodies` (responses and stream chunks),
`errors` (OpenAI-shaped errors, the body-size limit), `preference` (a preference vector as the
instruction the policy reads), `models` (registered versions loaded by `model` field), `batcher`
(concurrent requests as one lockstep batch of episodes), `app` (the FastAPI application: routes,
auth, metrics), `server` (what the command runs; a background server for benchmarks and tests),
`calibrate` (`orchestra calibrate`: the cost preference that meets a budget).
"""
