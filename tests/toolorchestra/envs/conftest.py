"""Fixtures for the envs tests: an unseen domain built here."""

from __future__ import annotations

from typing import Any

import pytest


def unseen_db(n: int = 24) -> dict[str, Any]:
    """A warehouse domain unlike the ToolScale ones: list tables, `ORD-0001` / `C100` / integer
    ids, foreign keys under nested objects and lists, a keyed map of parcels inside orders."""
    tiers = ["basic", "gold", "platinum"]
    states = ["open", "shipped", "delivered", "cancelled"]
    carriers = ["dhl", "ups", "post"]
    products = [
        {"id": p, "label": f"Widget model {p}", "price": round(4.5 + p * 1.25, 2), "active": p % 5 != 0,
         "dims": {"w_cm": 10 + p, "h_cm": 5 + p % 7}}
        for p in range(1, n + 1)
    ]
    customers, orders = [], []
    for i in range(n):
        cno = f"C{100 + i}"
        codes = [f"ORD-{2 * i + 1:04d}", f"ORD-{2 * i + 2:04d}"]
        customers.append({
            "customer_no": cno,
            "profile": {"full_name": f"Customer Number{i}", "contact": {"email": f"user{i}@shop.test",
                                                                         "phone": f"+1-555-{1000 + i}"}},
            "tier": tiers[i % 3],
            "orders": codes,
        })
        for k, code in enumerate(codes):
            orders.append({
                "order_code": code,
                "buyer": {"customer_no": cno},
                "state": states[(i + k) % 4],
                "items": [{"product_id": 1 + (i + k) % n, "qty": 1 + k}],
                "shipping": {"carrier": carriers[(i + k) % 3], "address": {"city": f"Town{i % 6}"}},
                "parcels": {f"PCL-{code[4:]}-{j}": {"weight_kg": 1.0 + j, "status": states[j % 3]} for j in range(2)},
                "total": round(10.0 * (k + 1) + i, 2),
            })
    return {"products": products, "customers": customers, "orders": orders}


@pytest.fixture
def unseen() -> dict[str, Any]:
    return unseen_db()
