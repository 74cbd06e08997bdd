"""Prefect tasks, one per stage: retries, artifacts, links to MLflow. Wiring only."""
