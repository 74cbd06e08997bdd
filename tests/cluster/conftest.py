"""Fixtures for the cluster-profile integration tests (see cluster_services.py)."""

from cluster_services import (  # noqa: F401 - fixtures
    llama_server,
    mlflow_server,
    postgres,
    prefect_server,
    ray_head,
    s3,
)
