"""Evaluation: the trained orchestrator against baselines on accuracy, cost, latency and preference
adherence, on identical task lists.

`benchmarks` (task lists and loaders for HLE / FRAMES JSONL and tau2 Task JSON), `judges` (the
shared rule scorer, then an LLM judge), `methods` (the orchestrator and the baselines), `runner`
(episodes, judging, records), `metrics` (incl. the definition of preference adherence), `report`
(table, Pareto plot, files).
"""
