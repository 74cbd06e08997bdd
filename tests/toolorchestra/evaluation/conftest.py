"""Fixtures for the evaluation tests: validated tasks, a catalog, scripted experts, preference pairs."""

from __future__ import annotations

import pytest
from helpers.eval_fixtures import ScriptedLLM, write_tasks_folder


@pytest.fixture(scope="session")
def eval_tasks(tmp_path_factory):
    return write_tasks_folder(tmp_path_factory.mktemp("validated"))


@pytest.fixture(scope="session")
def catalog():
    """The embedded catalog reduced to `ask_direct` (an expert on the `smollm2` alias, replaced by a
    script) and the code interpreter."""
    from toolorchestra.tools.catalog import load_embedded_catalog

    return load_embedded_catalog().subset(["ask_direct", "code_interpreter"])


@pytest.fixture
def expert() -> ScriptedLLM:
    return ScriptedLLM("42", model="smollm2")


@pytest.fixture(scope="session")
def pairs(catalog):
    from toolorchestra.preferences.grammar import generate_grammar_pairs

    found, _ = generate_grammar_pairs(catalog, kinds=["avoid_tool", "prefer_tool", "cost"], blocks=1)
    return found


@pytest.fixture
def settings(tmp_path):
    from toolorchestra.core.settings import Settings

    return Settings(workspace=tmp_path, state_dir=tmp_path / ".orchestra")
