"""What `orchestra serve-model` runs under: address, auth, batching, queue and size limits.

The bearer token comes from the environment variable `ORCHESTRA_SERVE_TOKEN` only (never a flag,
so it is not in the process list or shell history). Without one the server binds to loopback
only: `check_exposure` refuses any other host.
"""

from __future__ import annotations

import ipaddress
import os

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from toolorchestra.core.errors import ConfigError
from toolorchestra.llm.config import EngineChoice

TOKEN_ENV = "ORCHESTRA_SERVE_TOKEN"
DEFAULT_MODEL = "models:/orchestrator@champion"


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = DEFAULT_MODEL
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    token: SecretStr | None = Field(None, description="bearer token; None: no auth, loopback only")
    max_batch: int = Field(16, ge=1, description="episodes per lockstep batch")
    batch_window_ms: float = Field(10.0, ge=0, description="how long a batch waits for more requests")
    max_queue: int = Field(64, ge=1, description="requests waiting for a batch; more get 429")
    request_timeout_s: float = Field(300.0, gt=0, description="a request waiting longer gets 504")
    max_body_bytes: int = Field(256_000, ge=1024)
    max_messages: int = Field(64, ge=1)
    max_turns_limit: int = Field(32, ge=1, description="the most turns a request may ask for")
    max_models: int = Field(2, ge=1, description="registered versions kept loaded at once")
    trace_sample_rate: float = Field(0.0, ge=0.0, le=1.0, description="share of requests logged as MLflow traces")
    engine: EngineChoice = Field("auto", description="engine of the policy and the catalog's local experts: "
                                 "auto = llama.cpp on a CPU, transformers on a GPU")

    @property
    def auth(self) -> bool:
        return self.token is not None


def token_from_env() -> SecretStr | None:
    value = os.environ.get(TOKEN_ENV, "").strip()
    return SecretStr(value) if value else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(config: ServeConfig) -> None:
    """No token means nobody may reach the server from another machine."""
    if not config.auth and not is_loopback(config.host):
        raise ConfigError(None, f"--host {config.host} is not loopback and {TOKEN_ENV} is not set: "
                                f"set a token to serve beyond this machine, or bind to 127.0.0.1", key="host")
