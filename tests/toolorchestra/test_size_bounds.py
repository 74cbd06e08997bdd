"""Every size parameter of the episode, assembly and describe configs has an upper bound, named in
the error (issue 17: a `db_size: 1e12` once grew memory without end)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from toolorchestra.describe.measure import DescribeConfig
from toolorchestra.episodes.environment import EpisodeConfig
from toolorchestra.preferences.assemble import AssemblyConfig


@pytest.mark.parametrize(("model", "field"), [
    (EpisodeConfig, "max_turns"), (EpisodeConfig, "max_tokens"), (EpisodeConfig, "max_observation_chars"),
    (EpisodeConfig, "max_domain_tools"), (EpisodeConfig, "max_workers"),
    (AssemblyConfig, "instances_per_task"), (AssemblyConfig, "min_catalog_tools"), (AssemblyConfig, "max_tasks"),
    (AssemblyConfig, "max_policy_chars"),
    (DescribeConfig, "samples_per_category"), (DescribeConfig, "max_turns"), (DescribeConfig, "max_tokens"),
    (DescribeConfig, "max_workers"),
])
def test_a_huge_size_is_refused_with_its_bound(model, field):
    with pytest.raises(ValidationError, match=rf"{field}\n  Input should be less than or equal to \d"):
        model(**{field: 10**12})
