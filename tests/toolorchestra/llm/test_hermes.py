import doctest

import pytest

from toolorchestra.llm import hermes
from toolorchestra.llm.hermes import MalformedToolCall, format_tool_call, parse_tool_call, strip_tool_calls


def test_doctests():
    assert doctest.testmod(hermes).failed == 0


def test_round_trip_of_formatted_call():
    text = "I will compute.\n" + format_tool_call("code_interpreter", {"code": "print(1)"})
    call = parse_tool_call(text)
    assert call is not None and call.name == "code_interpreter" and call.arguments == {"code": "print(1)"}
    assert strip_tool_calls(text) == "I will compute."


def test_only_first_call_is_taken_and_unterminated_block_is_accepted():
    text = format_tool_call("a", {}) + format_tool_call("b", {})
    assert parse_tool_call(text).name == "a"
    assert parse_tool_call('<tool_call>{"name": "c", "arguments": {"x": 2}}').arguments == {"x": 2}


def test_arguments_as_json_string_are_accepted():
    call = parse_tool_call('<tool_call>{"name": "f", "arguments": "{\\"q\\": \\"hi\\"}"}</tool_call>')
    assert call.arguments == {"q": "hi"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call></tool_call>", "empty"),
        ("<tool_call>{name: f}</tool_call>", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "expected a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'missing "name"'),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "f", "arguments": "{oops"}</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "f", "args": {}}</tool_call>', "unexpected keys"),
    ],
)
def test_malformed_calls_say_what_is_wrong(text, message):
    with pytest.raises(MalformedToolCall, match=message):
        parse_tool_call(text)
