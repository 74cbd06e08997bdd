"""Declarative tool specs: derivation for every shared domain, tools.json I/O, spec validation."""

from __future__ import annotations

import json

import pytest
from helpers.third_party import TOOLSCALE, domain_folder, third_party

from toolorchestra.core.errors import ConfigError
from toolorchestra.envs.domain import Domain, load_domain
from toolorchestra.envs.engine import Engine
from toolorchestra.envs.toolspec import dump_specs, load_tools, parse_spec, parse_specs, save_tools


@pytest.mark.parametrize("name", [*TOOLSCALE, "tau2-mock"])
def test_derived_tools_for_shared_domains(name, tmp_path):
    path = domain_folder(name)
    domain = load_domain(path)
    specs = domain.tool_specs()
    kinds = {s.kind for s in specs}
    assert {"get", "update", "transfer"} <= kinds
    assert len({s.name for s in specs}) == len(specs)
    Engine(specs, domain.layouts)  # every derived spec binds to the layout
    save_tools(tmp_path / "tools.json", specs)
    assert load_tools(tmp_path / "tools.json") == specs
    for spec in specs:
        fn = spec.openai()["function"]
        assert fn["description"] and fn["parameters"]["type"] == "object"


def test_bank_tool_shapes():
    specs = {s.name: s for s in load_domain(third_party("toolscale", "bank")).tool_specs()}
    upd = specs["update_client_accounts_status"]
    assert upd.path == ["accounts", "{account_id}", "status"]
    assert upd.parameters["properties"]["status"]["enum"] == ["active", "frozen"]
    assert specs["set_beneficiary_status_revoked"].allowed_from == ["active"]
    assert specs["list_transactions_by_client_id"].path == ["client_id"]
    assert specs["create_transaction"].parent.table == "clients"


def test_unseen_domain_tools(unseen):
    specs = {s.name: s for s in Domain("warehouse", unseen).tool_specs()}
    assert specs["get_order_details"].id_param == "order_code"
    assert specs["get_product_details"].parameters["properties"]["id"]["type"] == "integer"
    assert specs["find_customer_by_profile_contact_email"].path == ["profile", "contact", "email"]
    assert specs["list_orders_by_buyer_customer_no"].path == ["buyer", "customer_no"]
    assert specs["update_order_parcels_status"].path == ["parcels", "{parcel_key}", "status"]
    assert specs["set_order_state_cancelled"].allowed_from == ["delivered", "open", "shipped"]
    create = specs["create_order"]
    assert create.parent.ref_path == ["buyer", "customer_no"] and create.parent.list_path == ["orders"]
    assert create.defaults["items"] == [] and create.defaults["parcels"] == {}


GOOD = {"kind": "get", "name": "get_x", "description": "d", "table": "t", "id_param": "x",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}


@pytest.mark.parametrize(
    ("change", "pattern"),
    [
        ({"kind": "exec"}, r"\$\.kind: unknown kind 'exec'"),
        ({"name": "bad name!"}, r"\$\.name: tool 'bad name!': String should match pattern"),
        ({"id_param": "y"}, "arguments not declared in parameters: \\['y'\\]"),
        ({"parameters": {"type": "array"}}, "type 'object'"),
        ({"parameters": {"type": "object", "properties": {"x": {"type": "strange"}}}}, "not a valid JSON schema"),
        ({"code": "import os"}, r"\$\.code: tool 'get_x': Extra inputs are not permitted"),
    ],
)
def test_invalid_specs(change, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_spec({**GOOD, **change})


def test_duplicates_and_layout_checks(tmp_path):
    with pytest.raises(ConfigError, match=r"\$\[1\]\.name: duplicate tool name 'get_x'"):
        parse_specs([GOOD, GOOD])
    domain = Domain("d", {"t": {"a": {"x": "a", "s": "on"}}})
    Engine(parse_specs([GOOD]), domain.layouts)
    with pytest.raises(ConfigError, match="unknown table 'nope'"):
        Engine(parse_specs([{**GOOD, "table": "nope"}]), domain.layouts)
    update = {"kind": "update", "name": "u", "description": "d", "table": "t", "id_param": "x",
              "path": ["s", "*"], "value_param": "v",
              "parameters": {"type": "object", "properties": {"x": {}, "v": {}}}}
    with pytest.raises(ConfigError, match="a write path must name one field"):
        Engine(parse_specs([update]), domain.layouts)
    (tmp_path / "tools.json").write_text(json.dumps(dump_specs(parse_specs([GOOD]))))
    assert load_tools(tmp_path / "tools.json")[0].name == "get_x"
