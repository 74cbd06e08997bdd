"""Secrets out of anything a trace records.

Two nets: the *values* of this process's secret-looking environment variables (names ending in
`_KEY`, `_TOKEN`, `_SECRET`, `_PASSWORD`, e.g. `OPENAI_API_KEY`, `ORCHESTRA_SERVE_TOKEN`: every
key the catalogs name is one), and shapes of credentials (bearer headers, `sk-...` keys,
`password=...`). Both become `[REDACTED]`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

REDACTED = "[REDACTED]"
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|_PASSWORD|_PASS)$", re.I)
_SHAPES = [
    re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"(?i)\b(api[_-]?key|access[_-]?token|secret|password|passwd)(\"?\s*[:=]\s*\"?)[^\s\"',}]{4,}"),
]
MIN_SECRET_CHARS = 6  # shorter values would redact ordinary words


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k) and len(v.strip()) >= MIN_SECRET_CHARS}
    return sorted(values, key=len, reverse=True)  # longest first: a secret containing another


def redact(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, REDACTED)
    for shape in _SHAPES:
        text = shape.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if m.re.groups == 2 else REDACTED, text)
    return text
