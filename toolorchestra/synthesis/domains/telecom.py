"""Embedded domain `telecom`: integer customer ids, `SUB-2025-0001` subscriptions, device lists."""

from __future__ import annotations

import random
from typing import Any

from toolorchestra.synthesis.domains import EmbeddedDomain, faker

POLICY = """# Mobile carrier support policy

- Authenticate the customer by email or customer id first.
- A subscription can be suspended only while `active`; `terminated` subscriptions cannot change.
- Plan changes take effect immediately; quote the monthly price from the plan record.
- Billing disputes go to a human agent.
"""

PLANS = [("P-BASIC", "Basic 5GB", 15.0, 5), ("P-PLUS", "Plus 20GB", 25.0, 20),
         ("P-MAX", "Max Unlimited", 45.0, 0), ("P-TRAVEL", "Travel 10GB", 35.0, 10)]


def build(seed: int, size: int) -> dict[str, Any]:
    fake, rng = faker(seed), random.Random(seed)
    plans = [{"plan_code": code, "name": name, "monthly_price": price, "data_gb": gb,
              "roaming": code == "P-TRAVEL"} for code, name, price, gb in PLANS]
    customers, subs = [], []
    for i in range(size):
        cid = 1000 + i
        customers.append({
            "id": cid,
            "full_name": fake.name(),
            "email": fake.unique.email(),
            "segment": rng.choice(["consumer", "consumer", "business"]),
            "billing": {"address": fake.street_address(), "city": fake.city(), "autopay": rng.random() < 0.5},
        })
        for _ in range(rng.randint(1, 2)):
            subs.append({
                "subscription_id": f"SUB-2025-{len(subs) + 1:04d}",
                "customer_id": cid,
                "plan_code": rng.choice(PLANS)[0],
                "msisdn": f"+1{rng.randint(2000000000, 9999999999)}",
                "status": rng.choice(["active", "active", "active", "suspended", "terminated"]),
                "devices": [{"imei": str(rng.randint(10**14, 10**15 - 1)), "model": rng.choice(["Pixel 8", "iPhone 15", "Galaxy S24"])}
                            for _ in range(rng.randint(1, 2))],
                "usage": {"data_gb": round(rng.uniform(0, 25), 2), "minutes": rng.randint(0, 900)},
            })
    return {"customers": customers, "plans": plans, "subscriptions": subs}


SPEC = EmbeddedDomain("telecom", "A mobile carrier's customer support.", POLICY, build)
