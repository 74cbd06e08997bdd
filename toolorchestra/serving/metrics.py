"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own per app."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("orchestra_requests", "API requests by HTTP status (the 200s are chat completions)",
                                ["status"], registry=self.registry)
        self.latency = Histogram("orchestra_request_seconds", "chat completion latency (s)",
                                 buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=self.registry)
        self.cost = Counter("orchestra_cost_usd", "orchestrator cost served (USD)", registry=self.registry)
        self.tokens = Counter("orchestra_tokens", "tokens used, policy and experts", ["model", "kind"],
                              registry=self.registry)
        self.stops = Counter("orchestra_stops", "episodes by stop reason", ["reason"], registry=self.registry)
        self.batch = Histogram("orchestra_batch_episodes", "episodes per lockstep batch",
                               buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry)
        self.batch_seconds = Histogram("orchestra_batch_seconds", "wall time of a lockstep batch (s)",
                                       registry=self.registry)
        self.queue = Gauge("orchestra_queue_depth", "requests waiting for a batch", registry=self.registry)
        self.in_flight = Gauge("orchestra_in_flight", "requests being answered", registry=self.registry)

    def on_batch(self, size: int, seconds: float) -> None:
        self.batch.observe(size)
        self.batch_seconds.observe(seconds)
