"""Errors cross process boundaries (Ray tasks, Prefect results, multiprocessing): they must pickle."""

from __future__ import annotations

import pickle

from toolorchestra.core.errors import ConfigError, OrchestraError


def test_config_error_round_trips_through_pickle():
    error = ConfigError("params.yaml", "must be positive", key="synthesize.db_size")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ConfigError and isinstance(copy, OrchestraError)
    assert (copy.file, copy.key, copy.reason, str(copy)) == (error.file, error.key, error.reason, str(error))
    bare = pickle.loads(pickle.dumps(ConfigError(None, "broken")))
    assert (bare.file, bare.key, str(bare)) == (None, None, "<config>: broken")

