"""Embedded domain `library`: members, books and loans as lists of records with `MEM-0001` ids."""

from __future__ import annotations

import random
from datetime import date, timedelta
from typing import Any

from toolorchestra.synthesis.domains import EmbeddedDomain, faker

POLICY = """# Library desk policy

- Identify the member by email or member id before changing anything.
- A loan can be renewed (due date moved) only while it is `active`; `lost` and `returned` loans are closed.
- Members with `suspended` standing cannot open new loans.
- Report fees exactly as stored; never waive a fee without a human librarian: transfer instead.
"""

GENRES = ["fiction", "history", "science", "children", "poetry", "biography"]


def build(seed: int, size: int) -> dict[str, Any]:
    fake, rng = faker(seed), random.Random(seed)
    books = [{
        "book_id": f"BK-{i + 1:05d}",
        "title": fake.catch_phrase(),
        "author": {"first_name": fake.first_name(), "last_name": fake.last_name()},
        "genre": rng.choice(GENRES),
        "published_year": rng.randint(1950, 2024),
        "copies": {"total": (total := rng.randint(1, 5)), "available": rng.randint(0, total)},
        "shelf": f"{rng.choice('ABCDEFG')}-{rng.randint(1, 30):02d}",
    } for i in range(size)]
    members, loans = [], []
    start = date(2025, 1, 1)
    for i in range(size):
        member_id = f"MEM-{i + 1:04d}"
        member_loans = []
        for _ in range(rng.randint(0, 3)):
            loan_id = f"LN-{len(loans) + 1:06d}"
            opened = start + timedelta(days=rng.randint(0, 300))
            loans.append({
                "loan_id": loan_id,
                "member_id": member_id,
                "book_id": rng.choice(books)["book_id"],
                "opened_on": opened.isoformat(),
                "due_on": (opened + timedelta(days=21)).isoformat(),
                "status": rng.choice(["active", "active", "returned", "overdue", "lost"]),
                "fees": {"late_fee": round(rng.choice([0, 0, 0.5, 1.25, 3.0]), 2), "currency": "EUR"},
            })
            member_loans.append(loan_id)
        members.append({
            "member_id": member_id,
            "name": {"first_name": fake.first_name(), "last_name": fake.last_name()},
            "email": f"{fake.user_name()}{i}@{fake.free_email_domain()}",
            "phone": fake.phone_number(),
            "standing": rng.choice(["good", "good", "good", "warned", "suspended"]),
            "membership": {"tier": rng.choice(["basic", "plus", "family"]), "since": fake.date_between("-8y", "-1m").isoformat()},
            "loans": member_loans,
        })
    return {"members": members, "books": books, "loans": loans}


SPEC = EmbeddedDomain("library", "A public library's lending desk.", POLICY, build)
