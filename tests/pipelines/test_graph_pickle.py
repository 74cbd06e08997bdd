"""A stage failure crosses process boundaries (Prefect task results, Ray): it must pickle."""

from __future__ import annotations

import pickle

from stagekit.graph import StageFailed


def test_stage_failed_round_trips_through_pickle():
    error = StageFailed("validate", "invalid", "no tasks left")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.stage, copy.kind, copy.transient, str(copy)) == ("validate", "invalid", False, str(error))
