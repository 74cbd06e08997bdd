"""The Pareto front and the table layout."""

from __future__ import annotations

from toolorchestra.evaluation.report import pareto_front


def test_pareto_front_keeps_only_undominated_methods():
    points = {"cheap": (0.001, 0.2), "dominated": (0.01, 0.2), "mid": (0.01, 0.5), "best": (0.1, 0.9),
              "pricey": (1.0, 0.9)}
    assert pareto_front(points) == ["cheap", "mid", "best"]
    assert pareto_front({}) == []
    assert pareto_front({"tie-a": (0.0, 0.5), "tie-b": (0.0, 0.5)}) == ["tie-a"]
