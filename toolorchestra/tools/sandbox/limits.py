"""`SandboxLimits`: the validated, frozen resource limits of one code-interpreter call.

The child applies them as rlimits (see `child.py`); the caller enforces the wall time and cuts the
output (see `runner.py` and `observation.py`).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SandboxLimits(BaseModel):
    """Resource limits of one code-interpreter call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_time_s: float = Field(10.0, gt=0, le=3600)
    cpu_time_s: float | None = Field(None, gt=0, le=3600)
    """CPU seconds per process (RLIMIT_CPU); None means one second more than `wall_time_s`."""
    memory_mb: int = Field(512, ge=32, le=1_048_576)
    """Private writable memory per process (RLIMIT_DATA: heap and anonymous mappings), in MiB."""
    address_space_mb: int | None = Field(None, ge=32, le=4_194_304)
    """Backstop for what RLIMIT_DATA does not count (shared mappings), as RLIMIT_AS in MiB; None
    means 4 x memory_mb. Address space is far larger than memory in use (shared libraries: torch
    alone maps about 0.8 GiB), so it cannot be the main limit."""
    max_output_bytes: int = Field(8000, ge=256, le=10_000_000)
    """Bytes of stdout + stderr shown in the observation; the rest is cut out and counted."""
    max_processes: int = Field(32, ge=1, le=4096)
    """Processes and threads the code may have at once (RLIMIT_NPROC), itself included."""
    max_file_mb: int = Field(64, ge=1, le=65536)
    """Largest file the code may write (RLIMIT_FSIZE), in MiB."""
    tmp_mb: int = Field(64, ge=1, le=4096)
    """Size of each private tmpfs (/tmp, /var/tmp, /dev/shm, /run/lock) of a call, in MiB (root
    callers; the memory is freed when the call ends)."""

    @model_validator(mode="after")
    def _consistent(self) -> SandboxLimits:
        if self.address_space_mb is not None and self.address_space_mb < self.memory_mb:
            raise ValueError(
                f"address_space_mb ({self.address_space_mb}) is below memory_mb ({self.memory_mb}); "
                "raise it (it is only a backstop) or leave it unset for 4 x memory_mb"
            )
        if self.cpu_time_s is not None and self.cpu_time_s > 10 * self.wall_time_s:
            raise ValueError(
                f"cpu_time_s ({self.cpu_time_s}) is over 10x wall_time_s ({self.wall_time_s}); "
                "the wall-time limit would always stop the code first: lower cpu_time_s or leave it unset"
            )
        return self

    @property
    def address_space_bytes(self) -> int:
        return (self.address_space_mb or 4 * self.memory_mb) * 2**20

    @property
    def cpu_seconds(self) -> int:
        if self.cpu_time_s is not None:
            return max(1, round(self.cpu_time_s))
        # A second past the wall time: a busy loop is then reported as a wall-time stop, never
        # a race between the two; threads can still burn CPU faster than the clock.
        return math.ceil(self.wall_time_s) + 1
