"""The parameter profiles under `params/` (e.g. the CPU toy profile `params/tiny.yaml`): complete
files every stage accepts, with params.yaml's paths, so `orchestra run --params params/<name>.yaml`
runs the same DVC graph with other sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROFILES = sorted((REPO / "params").glob("*.yaml"))


def test_the_toy_profile_exists():
    assert REPO / "params" / "tiny.yaml" in PROFILES


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_every_stage_accepts_the_profile(profile):
    from stagekit.graph import stage_order
    from stagekit.runner import check_all_params

    check_all_params(profile, stage_order(REPO))


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_the_profile_keeps_the_stage_graph(profile):
    default = yaml.safe_load((REPO / "params.yaml").read_text())
    chosen = yaml.safe_load(profile.read_text())
    assert list(chosen) == list(default), "a profile has every section of params.yaml, in order"
    for section, values in default.items():
        for key in ("deps", "outs"):
            assert chosen[section].get(key) == values.get(key), f"{profile.name}: {section}.{key} differs"
