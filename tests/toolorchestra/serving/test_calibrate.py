"""Budget calibration: the sweep measures the served loop, the choice meets the budget."""

from __future__ import annotations

import json

import pytest
from helpers.serve_fixtures import Calculator, served_calculator

from toolorchestra.core.errors import ConfigError
from toolorchestra.episodes.pool import QAItem
from toolorchestra.llm.base import Completion, Usage
from toolorchestra.serving.calibrate import calibrate, choose, load_tasks


class Frugal(Calculator):
    """Skips the code interpreter (and guesses 0) when told cost matters a lot or more."""

    @staticmethod
    def _reply(messages):
        user = messages[1]["content"]
        if messages[-1]["role"] == "user" and ("a lot about keeping the bill low" in user or "More than accuracy" in user):
            return Completion(text="0", usage=Usage(prompt_tokens=200, completion_tokens=2))
        return Calculator._reply(messages)


ITEMS = [QAItem(id=f"q{i}", question=f"What is {i} * 7?", answer=str(i * 7)) for i in range(1, 4)]


@pytest.fixture
def served(settings):
    return served_calculator(Frugal(), settings)


def test_sweep_measures_the_curve_and_the_choice_meets_the_budget(served):
    loose = calibrate(served, ITEMS, budget_usd=1.0, weights=[0, 0.5, 1, 2])
    by_weight = {p.cost_weight: p for p in loose.curve}
    assert [p.cost_weight for p in loose.curve] == [0, 0.5, 1, 2]
    assert by_weight[0].accuracy == by_weight[0.5].accuracy == 1.0 and by_weight[1].accuracy == 0.0
    assert by_weight[1].mean_cost_usd < by_weight[0].mean_cost_usd  # no tool call, one short turn
    assert by_weight[1].preference == "I care a lot about keeping the bill low." and by_weight[0].preference is None
    assert loose.chosen.cost_weight == 0 and loose.accuracy_lost == 0.0  # everything fits: nothing lost
    tight = choose(loose.curve, budget_usd=(by_weight[0].mean_cost_usd + by_weight[1].mean_cost_usd) / 2, tasks=3)
    assert tight.chosen.cost_weight == 1 and tight.accuracy_lost == 1.0  # the only setting within budget
    assert [p.meets_budget for p in tight.curve] == [False, False, True, True]
    impossible = choose(loose.curve, budget_usd=by_weight[2].mean_cost_usd / 2, tasks=3)
    assert impossible.chosen is None and impossible.accuracy_lost is None


def test_bad_inputs_are_config_errors(served, tmp_path):
    with pytest.raises(ConfigError, match="weights"):
        calibrate(served, ITEMS, budget_usd=1.0, weights=[-1])
    with pytest.raises(ConfigError, match="no calibration tasks"):
        load_tasks(tmp_path, None)
    (tmp_path / "qa").mkdir()
    (tmp_path / "qa" / "d.jsonl").write_text("\n".join(json.dumps(i.model_dump()) for i in ITEMS))
    assert [i.id for i in load_tasks(tmp_path, 2)] == ["q1", "q2"]
