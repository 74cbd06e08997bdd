"""Prefect flows: retrain (every stage), evaluate, promote. Wiring only: no data logic."""
