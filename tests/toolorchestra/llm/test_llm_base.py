"""`tools_by_row`: the per-chat tool schemas every batching backend uses."""

from __future__ import annotations

import doctest

import pytest

from toolorchestra.llm import base
from toolorchestra.llm.base import cut_at_stop, tools_by_row

SPEC = [{"type": "function", "function": {"name": "answer"}}]


def test_shared_tools_apply_to_every_chat_and_rows_win():
    assert tools_by_row([[], []], SPEC, None) == [SPEC, SPEC]
    assert tools_by_row([[], []], SPEC, [None, SPEC]) == [None, SPEC]


def test_a_row_count_mismatch_is_an_error():
    with pytest.raises(ValueError, match="one entry per chat"):
        tools_by_row([[], []], None, [SPEC])


def test_doctests():
    assert doctest.testmod(base).failed == 0


def test_the_reply_is_cut_at_the_earliest_stop_string_and_empty_ones_are_ignored():
    assert cut_at_stop("a STOP b END c", ["END", "STOP"]) == ("a ", True)
    assert cut_at_stop("no stop here", ["", "STOP"]) == ("no stop here", False)
    assert cut_at_stop("x", None) == ("x", False)
