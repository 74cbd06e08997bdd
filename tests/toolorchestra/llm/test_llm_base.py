"""`tools_by_row`: the per-chat tool schemas every batching backend uses."""

from __future__ import annotations

import pytest

from toolorchestra.llm.base import tools_by_row

SPEC = [{"type": "function", "function": {"name": "answer"}}]


def test_shared_tools_apply_to_every_chat_and_rows_win():
    assert tools_by_row([[], []], SPEC, None) == [SPEC, SPEC]
    assert tools_by_row([[], []], SPEC, [None, SPEC]) == [None, SPEC]


def test_a_row_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="one entry per chat"):
        tools_by_row([[], []], None, [SPEC])
