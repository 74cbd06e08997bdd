"""Serving the registered orchestrator behind an OpenAI-compatible HTTP API (`orchestra serve-model`).

`config` (limits, auth), `schemas` (the request and response bodies), `preference` (a preference
vector as the instruction the policy reads), `models` (registered versions loaded by `model`
field), `batcher` (concurrent requests as one lockstep batch of episodes), `app` (the FastAPI
application: routes, auth, size limits, metrics).
"""
