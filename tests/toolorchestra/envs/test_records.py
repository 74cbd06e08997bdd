"""A domain's records in the code sandbox: the flat view, rows/find, and a real sandboxed call."""

from __future__ import annotations

import statistics
import sys

import pytest

from toolorchestra.envs.records import MODULE, flat_database, run_program, sandbox_files
from toolorchestra.synthesis.domains import load_embedded


@pytest.fixture(scope="module")
def library():
    return load_embedded("library", seed=0, size=12)


def test_records_are_keyed_as_questions_word_their_fields(library):
    database = flat_database(library)
    loan = database["tables"]["loans"][0]
    raw = library.db["loans"][0]
    assert loan["id"] == loan["loan id"] == raw["loan_id"]
    assert loan["fees late fee"] == raw["fees"]["late_fee"] and loan["status"] == raw["status"]
    member = database["tables"]["members"][0]
    assert member["loans"] == library.db["members"][0]["loans"]  # a list field keeps its list
    assert member["first name"] == library.db["members"][0]["name"]["first_name"]
    assert database["aliases"]["loan"] == database["aliases"]["loans"] == "loans"


def test_rows_and_find_errors_name_what_exists(library):
    database = flat_database(library)
    some = database["tables"]["members"][3]
    assert run_program(f"print(find('member', 'email', {some['email']!r})['id'])", database) == some["id"]
    with pytest.raises(KeyError, match="no table 'patients'; tables: books, loans, members"):
        run_program("rows('patients')", database)
    with pytest.raises(LookupError, match=r"0 records of 'members' have 'email' == 'nobody'.*fields: \["):
        run_program("find('members', 'email', 'nobody')", database)


def test_the_question_shaped_helpers_count_and_aggregate_over_the_records(library):
    database = flat_database(library)
    loans = database["tables"]["loans"]
    lost = sum(loan["status"] == "lost" for loan in loans)
    assert run_program("print(count('loans', 'status', 'lost'))", database) == str(lost)
    member = next(m for m in database["tables"]["members"] if len(m["loans"]) >= 2)
    fees = [loan["fees late fee"] for loan in loans if loan["member id"] == member["id"]]
    assert len(fees) >= 2
    for helper, expected in (("total", sum(fees)), ("average", statistics.mean(fees)), ("maximum", max(fees)),
                             ("minimum", min(fees))):
        owner = f"find('members', 'email', {member['email']!r})"
        by_record = run_program(f"print({helper}('fees late fee', 'loans', 'member id', {owner}))", database)
        by_id = run_program(f"print({helper}('fees late fee', 'loans', 'member id', {member['id']!r}))", database)
        assert float(by_record) == float(by_id) == round(expected, 2), helper
    with pytest.raises(LookupError, match="no record of 'loans' with a number in 'fees late fee'"):
        run_program("print(total('fees late fee', 'loans', 'member id', 'nobody'))", database)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_a_sandboxed_call_sees_the_records_with_the_helpers_defined(library):
    from toolorchestra.tools.code_interpreter import CodeInterpreter, SandboxLimits

    files, note = sandbox_files(library)
    tool = CodeInterpreter(SandboxLimits(wall_time_s=5, memory_mb=256)).with_files(files, preload=MODULE, note=note)
    assert "The library database is loaded" in tool.description and "Tables: members, books, loans." in tool.description
    program = "print(sum(r['status'] == 'active' for r in rows('loans')))"
    out = tool.run({"code": program})
    assert out.ok, out.content
    assert out.content.splitlines()[-1] == run_program(program, flat_database(library))
    assert int(out.content.splitlines()[-1]) == sum(1 for loan in library.db["loans"] if loan["status"] == "active")
    bad = tool.run({"code": "print(rows('patients'))"})
    assert not bad.ok and "KeyError" in bad.content and "tables: books, loans, members" in bad.content
