"""Embedded domain `clinic`: tables keyed by random ids, keyed maps of insurance policies."""

from __future__ import annotations

import random
import string
from datetime import date, timedelta
from typing import Any

from toolorchestra.synthesis.domains import EmbeddedDomain, faker

POLICY = """# Clinic front desk policy

- Verify the patient by email or phone before discussing appointments.
- Appointments can be cancelled only while `scheduled` or `confirmed`; completed ones are final.
- Insurance policies are set to `inactive`, never deleted.
- Medical advice is out of scope: transfer to a human agent.
"""

SPECIALTIES = ["cardiology", "dermatology", "general", "pediatrics", "orthopedics"]


def _rid(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(n))


def build(seed: int, size: int) -> dict[str, Any]:
    fake, rng = faker(seed), random.Random(seed)
    doctors = {}
    for _ in range(max(3, size // 4)):
        did = _rid(rng)
        doctors[did] = {"doctor_id": did, "name": f"Dr. {fake.first_name()} {fake.last_name()}",
                        "specialty": rng.choice(SPECIALTIES), "room": f"R{rng.randint(100, 399)}",
                        "accepting_new": rng.random() < 0.7}
    patients, appointments = {}, {}
    for _ in range(size):
        pid = _rid(rng)
        policies = {}
        for _ in range(rng.randint(1, 2)):
            pol = f"POL{rng.randint(100000, 999999)}"
            policies[pol] = {"policy_id": pol, "insurer": rng.choice(["Aetna", "Cigna", "Humana", "Kaiser"]),
                             "status": rng.choice(["active", "active", "expired", "inactive"]),
                             "copay": float(rng.choice([10, 20, 25, 40]))}
        patients[pid] = {
            "patient_id": pid,
            "name": {"first_name": fake.first_name(), "last_name": fake.last_name()},
            "contact": {"email": fake.unique.email(), "phone": fake.unique.phone_number()},
            "address": {"street": fake.street_address(), "city": fake.city(), "zip": fake.postcode()},
            "date_of_birth": fake.date_of_birth(minimum_age=1, maximum_age=90).isoformat(),
            "insurance_policies": policies,
        }
        for _ in range(rng.randint(0, 3)):
            aid = _rid(rng, 10)
            day = date(2025, 6, 1) + timedelta(days=rng.randint(0, 120))
            appointments[aid] = {
                "appointment_id": aid, "patient_id": pid, "doctor_id": rng.choice(list(doctors)),
                "slot": {"date": day.isoformat(), "time": f"{rng.randint(8, 16):02d}:{rng.choice(['00', '30'])}"},
                "status": rng.choice(["scheduled", "confirmed", "completed", "cancelled", "no_show"]),
                "reason": rng.choice(["check-up", "follow-up", "vaccination", "consultation", "test results"]),
                "fee": float(rng.choice([50, 80, 120, 150])),
            }
    return {"patients": patients, "doctors": doctors, "appointments": appointments}


SPEC = EmbeddedDomain("clinic", "A clinic's appointment desk.", POLICY, build)
