"""The Great Expectations suite on preference pairs."""

from __future__ import annotations

import pytest

from toolorchestra.preferences.expectations import PreferenceSuiteError, raise_on_failure, validate_pair_rows
from toolorchestra.preferences.grammar import KINDS, generate_grammar_pairs
from toolorchestra.preferences.pairs import pair_rows
from toolorchestra.tools.catalog import load_embedded_catalog

TOOLS = ["web_search", "answer"]


def row(i, instruction, vector, kind="cost"):
    return {"id": f"p{i}", "instruction": instruction, "vector": vector, "kind": kind}


def test_generated_pairs_pass():
    catalog = load_embedded_catalog()
    pairs, _ = generate_grammar_pairs(catalog)
    tools = [t.name for t in catalog.tools]
    report = validate_pair_rows(pair_rows(pairs), tools, kinds=KINDS, models=list(catalog.models))
    assert report.success and report.evaluated == 10
    raise_on_failure(report)
    # `models/<alias>` keys (avoid_model pairs) are known only for the catalog's models
    unknown = validate_pair_rows(pair_rows(pairs), tools, kinds=KINDS)
    assert not unknown.success and any("weights.key" in f and "models/" in f for f in unknown.failures)


def test_each_broken_row_fails_its_expectation():
    rows = [
        row(1, "Keep it cheap.", {"accuracy": 1, "cost": 1}),
        row(2, "keep it   CHEAP", {"cost": 2}),                       # duplicate after normalising
        row(3, "", {"cost": 1}),                                      # empty instruction
        row(4, "Be quick.", {"latency": float("inf")}),               # not finite
        row(5, "Be exact.", {"accuracy": float("nan")}),              # NaN
        row(6, "No calculator.", {"calls/calculator": -1}),          # unknown tool
        row(7, "Nothing.", {}),                                       # empty vector
        row(7, "Whatever.", {"cost": 1}, kind="vibes"),               # duplicate id, unknown kind
        row(9, "Cheap.", {"cost": "low"}),                            # not a number
    ]
    report = validate_pair_rows(rows, TOOLS, kinds=KINDS)
    assert not report.success
    failed = "\n".join(report.failures)
    for expected in [
        "pairs.instruction_norm: expect_column_values_to_be_unique",
        "pairs.instruction_norm: expect_column_values_to_not_be_null",
        "pairs.instruction: expect_column_value_lengths_to_be_between",
        "pairs.n_keys: expect_column_values_to_be_between",
        "pairs.id: expect_column_values_to_be_unique",
        "pairs.kind: expect_column_values_to_be_in_set",
        "weights.key: expect_column_values_to_be_in_set failed (1 unexpected; e.g. 'calls/calculator')",
        "weights.weight: expect_column_values_to_not_be_null failed (2 unexpected",
        "weights.weight: expect_column_values_to_be_between failed (1 unexpected; e.g. inf)",
    ]:
        assert expected in failed, failed
    with pytest.raises(PreferenceSuiteError, match="failed 9 of 10 expectations"):
        raise_on_failure(report)
