"""The rule-based answer judges shared by describe, training and evaluation."""

from __future__ import annotations

import pytest

from toolorchestra.episodes.judge import contains_answer, judge_answer, parse_number


@pytest.mark.parametrize(("predicted", "gold"), [
    ("391", "391"), ("391.0", 391), ("3.91e2", "391"), ("1,000", "1000"), ("The answer is 391.", "391"),
    ("391 apples", 391), ("$12.50", "12.5"), ("  Canberra. ", "canberra"), ("CANBERRA", "Canberra"),
    ("3.14160", "3.1416"),
])
def test_matches(predicted, gold):
    assert judge_answer(predicted, gold)


@pytest.mark.parametrize(("predicted", "gold"), [
    ("42", "391"), ("", "391"), (None, "391"), ("391 or 392", "391"), ("Bern", "Canberra"),
    ("Canberra and Ottawa", "Canberra"), ("3.2", "3.1416"),
])
def test_mismatches(predicted, gold):
    assert not judge_answer(predicted, gold)


def test_numeric_tolerance_is_configurable():
    assert not judge_answer("100.5", "100", rel_tol=1e-4)
    assert judge_answer("100.5", "100", rel_tol=1e-2)


def test_parse_number_rejects_text_and_non_finite():
    assert parse_number("12,345.5") == 12345.5
    assert parse_number("twelve") is None
    assert parse_number(float("inf")) is None
    assert parse_number(True) is None


def test_contains_answer_matches_whole_numbers_only():
    assert contains_answer("Output:\n391\n", 391)
    assert contains_answer("Canberra is the capital of Australia.", "canberra")
    assert not contains_answer("ids 13910 and 7", "391")
    assert not contains_answer("nothing here", "Lima")
    assert not contains_answer(None, "x")


def test_docstring_examples():
    import doctest

    import toolorchestra.episodes.judge as judge

    result = doctest.testmod(judge)
    assert result.failed == 0 and result.attempted >= 7
