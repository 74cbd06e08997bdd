"""Fixtures for the preferences tests: a small validated-task folder and a two-expert catalog."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.pref_fixtures import expert_catalog_data, write_validated

from toolorchestra.tools.catalog import parse_catalog


@pytest.fixture
def validated(tmp_path: Path) -> Path:
    return write_validated(tmp_path / "validated")


@pytest.fixture
def expert_catalog(tmp_path: Path):
    return parse_catalog(expert_catalog_data(), source="<test catalog>", base_dir=tmp_path)
