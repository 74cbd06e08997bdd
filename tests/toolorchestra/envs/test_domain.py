"""Loading domain folders: the shared databases load; malformed inputs fail naming file and path."""

from __future__ import annotations

import json

import pytest
from helpers.third_party import TOOLSCALE, third_party

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.domain import Domain, Limits, load_domain, validate_db


@pytest.mark.parametrize("name", TOOLSCALE)
def test_toolscale_domains_load(name):
    domain = load_domain(third_party("toolscale", name))
    assert domain.name == name and domain.policy and domain.tools is None
    assert all(layout.kind == "map" and layout.id_field for layout in domain.layouts.values())


def test_tau2_mock_loads():
    domain = load_domain(third_party("tau2-mock"))
    assert set(domain.layouts) == {"tasks", "users"}
    assert domain.layouts["tasks"].id_field == "task_id"


def _write(tmp_path, text, name="db.json"):
    (tmp_path / name).write_text(text)
    return tmp_path


def test_not_json(tmp_path):
    with pytest.raises(ConfigError, match=r"db.json: not JSON: Expecting .* line 2 column"):
        load_domain(_write(tmp_path, '{"a": {}\n,,}'))


def test_missing_db_and_not_a_folder(tmp_path):
    with pytest.raises(ConfigError, match="db.json: file not found"):
        load_domain(tmp_path)
    with pytest.raises(ConfigError, match="not a folder"):
        load_domain(tmp_path / "nope")


@pytest.mark.parametrize(
    ("db", "pattern"),
    [
        ([1, 2], r"\$: the database must be a JSON object"),
        ({}, r"\$: the database has no tables"),
        ({"users": 3}, r"\$\.users: table is an integer; a table must be an object"),
        ({"users": "x"}, r"\$\.users: table is a string"),
        ({"users": {"u1": {"id": "u1"}, "u2": [1]}}, r'\$\.users\.u2: record is an array'),
        ({"users": {"u 1": 5}}, r'\$\.users\["u 1"\]: record is an integer'),
        ({"users": [{"id": 1}, "x"]}, r"\$\.users\[1\]: record is a string"),
        ({"users": [{"name": "a"}, {"name": "a"}]}, r"\$\.users: records without ids"),
        ({"users": [{"id": "a"}, {"x": 1}]}, r"\$\.users: records without ids"),
    ],
)
def test_malformed_databases(db, pattern):
    with pytest.raises(ConfigError, match=pattern):
        validate_db(db, source="db.json")


def test_depth_and_size_limits(tmp_path):
    deep: dict = {"leaf": 1}
    for _ in range(60):
        deep = {"n": deep}
    with pytest.raises(ConfigError, match=r"<config>: \$\.t\.r\.n\.n.*: nesting deeper than 48 levels"):
        validate_db({"t": {"r": deep}}, source=None)
    with pytest.raises(ConfigError, match=r"db.json: \$\.t\.r\.n\.n.*: nesting deeper than 10 levels"):
        load_domain(_write(tmp_path, json.dumps({"t": {"r": deep}})), limits=Limits(max_depth=10))
    with pytest.raises(ConfigError, match="db.json: 9 bytes exceed the limit of 5"):
        load_domain(_write(tmp_path, json.dumps({"t": {}})), limits=Limits(max_bytes=5))
    with pytest.raises(ConfigError, match=r"\$\.t: 3 records exceed the limit of 2"):
        validate_db({"t": [{"id": 1}, {"id": 2}, {"id": 3}]}, limits=Limits(max_records_per_table=2))
    # deeper than Python's JSON parser can recurse: still a clear error, not a crash
    with pytest.raises(ConfigError, match="db.json: nesting too deep to parse"):
        load_domain(_write(tmp_path, "[" * 100_000 + "]" * 100_000))


def test_bad_tools_json_names_file_and_path(tmp_path):
    _write(tmp_path, json.dumps({"t": {"a": {"id": "a"}}}))
    _write(tmp_path, json.dumps([{"kind": "get", "name": "g", "description": "d", "table": "t"}]), "tools.json")
    with pytest.raises(ConfigError, match=r"tools.json: \$\[0\]\.id_param: tool 'g': Field required"):
        load_domain(tmp_path)
    _write(tmp_path, json.dumps([{"kind": "run_python", "name": "g"}]), "tools.json")
    with pytest.raises(ConfigError, match=r"tools.json: \$\[0\]\.kind: unknown kind 'run_python'"):
        load_domain(tmp_path)


def test_unseen_domain_from_memory(unseen):
    domain = Domain("warehouse", unseen)
    assert domain.layouts["orders"].kind == "list" and domain.layouts["orders"].id_field == "order_code"
    assert domain.layouts["products"].id_type == "integer"
    assert domain.layouts["customers"].id_field == "customer_no"
