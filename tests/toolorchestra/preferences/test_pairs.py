"""Preference pairs: the model, intents, the direction check against the real reward, files."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from toolorchestra.core.errors import ConfigError
from toolorchestra.preferences.pairs import (
    PreferencePair,
    check_direction,
    intents_from_vector,
    known_keys,
    load_pairs,
    save_pairs,
    vector_key,
)


def pair(vector, intents, **kw):
    return PreferencePair(id="p", instruction="x", vector=vector, kind="avoid_tool", template="t",
                          intents=intents, **kw)


def test_intents_follow_the_reward_orientation():
    got = {(i.key, i.prefer) for i in intents_from_vector({"cost": 1, "latency": -1, "calls/a": -2, "calls/b": 1,
                                                              "accuracy": 1, "calls/c": 0})}
    assert got == {("cost", "lower"), ("latency", "higher"), ("calls/a", "lower"), ("calls/b", "higher"),
                   ("accuracy", "higher")}


def test_direction_check_catches_a_wrong_sign():
    avoid = [{"key": "calls/web_search", "prefer": "lower"}]
    assert check_direction(pair({"calls/web_search": -1.0}, avoid)) == []
    problems = check_direction(pair({"calls/web_search": 1.0}, avoid))
    assert len(problems) == 1 and "calls/web_search lower should win" in problems[0]
    # a "cheaper" intent with a negative cost weight (the released code's sign bug) is caught
    assert check_direction(pair({"cost": -1.0}, [{"key": "cost", "prefer": "lower"}]))
    assert check_direction(pair({"accuracy": 1.0}, [{"key": "cost", "prefer": "lower"}]))


def test_model_rejects_bad_pairs():
    with pytest.raises(ValidationError, match="finite"):
        pair({"cost": float("nan")}, [{"key": "cost", "prefer": "lower"}])
    with pytest.raises(ValidationError):
        pair({}, [{"key": "cost", "prefer": "lower"}])
    with pytest.raises(ValidationError):
        pair({"cost": 1.0}, [])


def test_keys_and_vector_key():
    assert known_keys(["a"]) == {"accuracy", "cost", "latency", "calls/a"}
    assert vector_key({"b": 1, "a": 0.1 + 0.2}) == vector_key({"a": 0.3, "b": 1.0})


def test_round_trip_and_broken_file(tmp_path):
    p = pair({"calls/x": -1.0}, [{"key": "calls/x", "prefer": "lower"}], slots={"tool": "x"})
    save_pairs(tmp_path / "p.jsonl", [p])
    assert load_pairs(tmp_path / "p.jsonl") == [p]
    (tmp_path / "bad.jsonl").write_text(p.model_dump_json() + "\n" + '{"id": "q"}\n')
    with pytest.raises(ConfigError, match="bad.jsonl: line 2"):
        load_pairs(tmp_path / "bad.jsonl")
    assert p.tools == ["x"]
