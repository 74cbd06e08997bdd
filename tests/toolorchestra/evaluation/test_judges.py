"""Judges: the shared rule first, the LLM judge only when it failed on an answered QA task."""

from __future__ import annotations

import pytest
from helpers.eval_fixtures import ScriptedLLM

from toolorchestra.evaluation.judges import (
    LLMJudge,
    exact_match,
    judge_qa,
    judge_tool_use,
    numeric_match,
    parse_verdict,
    rule_method,
)
from toolorchestra.llm.base import LLM, LLMError


@pytest.mark.parametrize(("pred", "gold", "exact", "numeric"), [
    ("Canberra.", "canberra", True, False),
    ("1,000", "1000", True, True),
    ("3.91e2", "391", False, True),
    ("The answer is 391 apples", "391", False, True),
    ("390", "391", False, False),
    ("", "x", False, False),
    (None, "x", False, False),
])
def test_rule_judges(pred, gold, exact, numeric):
    assert exact_match(pred, gold) is exact
    assert numeric_match(pred, gold) is numeric


@pytest.mark.parametrize(("reply", "verdict"), [
    ("yes", True), ("Yes.", True), ("correct", True), ("No, it differs", False), ("Incorrect.", False),
    ("I am not sure", None), ("", None), ("extracted_final_answer: 4\ncorrect: no", False), ("Correct: YES", True),
])
def test_parse_verdict(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_llm_judge_is_asked_only_when_exact_match_fails():
    llm = ScriptedLLM("yes")
    judge = LLMJudge(llm)
    right = judge_qa("Capital?", "Canberra", "Canberra", rule_correct=True, llm_judge=judge)
    assert right.correct and right.method == "exact" and llm.calls == 0
    unanswered = judge_qa("Capital?", "  ", "Canberra", rule_correct=False, llm_judge=judge)
    assert not unanswered.correct and unanswered.method == "none" and llm.calls == 0
    paraphrase = judge_qa("Capital?", "It is the city of Canberra", "Canberra", rule_correct=False, llm_judge=judge)
    assert paraphrase.correct and paraphrase.method == "llm" and paraphrase.llm_reply == "yes" and llm.calls == 1
    assert "Correct answer: Canberra" in llm.prompts[0][0]["content"]
    no_judge = judge_qa("Capital?", "Sydney", "Canberra", rule_correct=False, llm_judge=None)
    assert not no_judge.correct and no_judge.method == rule_method("Canberra") == "exact"


class Failing(LLM):
    model = "down"

    def chat(self, messages, *, tools=None, max_tokens=256, temperature=0.0, seed=None, stop=None):
        raise LLMError("endpoint down")


def test_judge_failure_or_garbage_counts_as_wrong_and_is_recorded():
    failed = judge_qa("q", "a", "b", rule_correct=False, llm_judge=LLMJudge(Failing()))
    assert not failed.correct and "endpoint down" in failed.error
    garbage = judge_qa("q", "a", "b", rule_correct=False, llm_judge=LLMJudge(ScriptedLLM("maybe?")))
    assert not garbage.correct and "no yes/no verdict" in garbage.error


def test_tool_use_judgement_keeps_the_three_criteria():
    verdict = judge_tool_use(False, {"db": 1.0, "action": 0.0, "communicate": 1.0, "unmatched_actions": ["a1"]})
    assert verdict.method == "toolscale" and not verdict.correct and verdict.details["unmatched_actions"] == ["a1"]
