"""Domains built in the tests, with conventions unlike the vendored ToolScale ones."""

from __future__ import annotations

from typing import Any


def events_db(n: int = 20) -> dict[str, Any]:
    """Conventions unlike ToolScale's: a list table keyed by `code`, a map table keyed by
    `EVT-...` without an id field inside, integer ticket numbers, a reference nested in an object
    and a keyed map of sessions with a state enumeration."""
    states = ["open", "sold_out", "closed"]
    venues = [{"code": f"V-{i:02d}", "name": f"Hall {chr(65 + i)}", "address": {"city": f"City{i % 4}"},
               "capacity": 100 * (i + 1)} for i in range(max(3, n // 4))]
    events = {}
    for i in range(n):
        events[f"EVT-{1000 + i}"] = {
            "title": f"Concert number {i}",
            "venue_code": venues[i % len(venues)]["code"],
            "genre": ["rock", "jazz", "pop"][i % 3],
            "sessions": {f"S{i}-{k}": {"starts": f"2026-0{1 + k}-1{i % 9}", "state": states[(i + k) % 3],
                                       "price": 20.0 + k * 5} for k in range(2)},
        }
    tickets = [{"ticket_no": t + 1, "event": {"id": f"EVT-{1000 + t % n}"},
                "holder": {"email": f"fan{t}@mail.test", "name": f"Fan {t}"},
                "status": ["valid", "used", "refunded", "valid"][t % 4], "price_paid": 20.0 + t % 3}
               for t in range(3 * n)]
    return {"venues": venues, "events": events, "tickets": tickets}
