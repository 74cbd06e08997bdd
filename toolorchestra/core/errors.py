"""Error types shared across layers.

Every error a user can cause (a broken file, a bad argument, an unreachable endpoint) is an
`OrchestraError` whose message already says what to fix, so the CLI can print it on one line
without a traceback.
"""

from __future__ import annotations

from pathlib import Path


class OrchestraError(Exception):
    """Base class for errors that are reported to the user without a traceback."""


class ConfigError(OrchestraError):
    """A configuration or data file is broken: names the file, the key (or JSON path) and why."""

    def __init__(self, file: str | Path | None, reason: str, key: str | None = None) -> None:
        self.file = str(file) if file is not None else None
        self.key = key
        self.reason = reason
        where = self.file or "<config>"
        if key:
            where = f"{where}: {key}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        return (type(self), (self.file, self.reason, self.key))
