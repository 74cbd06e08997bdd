"""The Pareto front, and the docstring examples of the evaluation and registry modules."""

from __future__ import annotations

import pytest

from toolorchestra.evaluation.report import pareto_front


def test_pareto_front_keeps_only_undominated_methods():
    points = {"cheap": (0.001, 0.2), "dominated": (0.01, 0.2), "mid": (0.01, 0.5), "best": (0.1, 0.9),
              "pricey": (1.0, 0.9)}
    assert pareto_front(points) == ["cheap", "mid", "best"]
    assert pareto_front({}) == []
    assert pareto_front({"tie-a": (0.0, 0.5), "tie-b": (0.0, 0.5)}) == ["tie-a"]


@pytest.mark.parametrize("module", ["toolorchestra.evaluation.judges", "toolorchestra.evaluation.metrics",
                                    "toolorchestra.evaluation.report", "toolorchestra.registry.gate",
                                    "toolorchestra.registry.store"])
def test_docstring_examples_hold(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
