"""Orchestrator trajectories as MLflow 3 traces (`trajectory`), with secrets redacted (`redact`)."""
