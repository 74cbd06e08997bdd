"""Schema inference: field paths and types, enums, ids, keyed maps, foreign keys, id styles."""

from __future__ import annotations

import pytest
from helpers.third_party import third_party

from toolorchestra.envs.domain import Domain, load_domain
from toolorchestra.envs.idstyle import infer_id_style, next_id
from toolorchestra.envs.schema import json_path, singular


def test_bank_schema():
    schema = load_domain(third_party("toolscale", "bank")).schema
    clients = schema.table("clients")
    assert clients.layout.id_field == "client_id"
    assert clients.maps["accounts"].id_field == "account_id" and clients.maps["cards"].id_field == "card_id"
    status = clients.fields["accounts.*.status"]
    assert status.enum == ["active", "frozen"] and status.types == ["string"]
    assert clients.fields["accounts.*.balance.current"].types == ["number"]
    assert clients.fields["name.middle_name"].nullable
    assert clients.fields["contact.email"].unique
    tx = schema.table("transactions")
    assert [(r.table, r.map_path) for r in tx.fields["client_id"].references] == [("clients", None)]
    assert [(r.table, r.map_path) for r in tx.fields["account_id"].references] == [("clients", "accounts")]
    loans = schema.table("loans").fields
    assert loans["payment_schedule[].transaction_id"].references[0].table == "transactions"
    assert [r.table for r in clients.fields["loan_ids[]"].references] == ["loans"]
    assert clients.id_style.kind == "pattern" and len(clients.id_style.template) == 8


def test_unseen_domain_schema(unseen):
    schema = Domain("warehouse", unseen).schema
    orders = schema.table("orders")
    assert orders.layout.kind == "list"
    assert orders.id_style.kind == "sequence" and orders.id_style.prefix == "ORD-" and orders.id_style.width == 4
    assert "parcels" in orders.maps and orders.maps["parcels"].id_field is None
    assert orders.fields["parcels.*.status"].enum == ["open", "shipped"]
    assert orders.fields["state"].enum == ["cancelled", "delivered", "open", "shipped"]
    assert orders.fields["buyer.customer_no"].references[0].table == "customers"
    assert orders.fields["items[].product_id"].references[0].table == "products"
    # integer quantities never pass for foreign keys to integer product ids
    assert orders.fields["items[].qty"].references == []
    assert schema.table("customers").fields["orders[]"].references[0].table == "orders"
    assert schema.table("products").id_style.kind == "integer"
    assert schema.table("customers").fields["profile.contact.email"].unique


def test_singular_and_json_path():
    assert [singular(w) for w in ["clients", "beneficiaries", "movies", "menu_board", "addresses", "status"]] == [
        "client", "beneficiary", "movie", "menu_board", "address", "status"]
    assert json_path("t", "a b", 3, "x") == '$.t["a b"][3].x'


@pytest.mark.parametrize(
    ("ids", "kind", "new"),
    [
        (["ORD-0001", "ORD-0002", "ORD-0010"], "sequence", "ORD-0011"),
        (["task_1", "task_2"], "sequence", "task_3"),
        ([3, 9, 4], "integer", 10),
        (["3f2b8a1c-0000-4000-8000-000000000001"], "uuid", None),
        (["J5IXN2S-M1", "Q7AAB3K-M1", "Z0ZZ9Z9-M1", "AB12CDE-M1", "XY98ZW7-M1"], "pattern", None),
    ],
)
def test_id_styles(ids, kind, new):
    style = infer_id_style(ids)
    assert style.kind == kind
    minted = next_id(style, set(ids), salt="t", n_created=0)
    assert minted not in ids
    assert minted == next_id(style, set(ids), salt="t", n_created=0)  # deterministic
    if new is not None:
        assert minted == new
    if kind == "pattern":
        assert minted.endswith("-M1") and len(minted) == 10 and minted[:7].isalnum() and minted[:7].isupper()
    assert next_id(style, set(ids) | {minted}, salt="t", n_created=1) != minted
