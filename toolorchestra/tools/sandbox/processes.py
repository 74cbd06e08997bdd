"""The processes of sandboxed calls: the sandbox uid pool, /proc scans, and killing all a call started.

A root caller runs each call as a dedicated uid leased from a pool (`UidLease`); afterwards
`kill_all` kills that uid's every process with `kill(-1)` sent as the uid (`reaper.py`). A
non-root caller cannot change uid, so `kill_all` kills the call's process group and then the
escapees found by the call's marker (`MARKER_ENV`) in their environment. See the package
docstring for why.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from toolorchestra.tools.base import ToolError

log = logging.getLogger(__name__)

DEFAULT_UID_BASE = 2_000_000_000
"""First sandbox uid for a root caller: inside the range systemd documents as unused."""
MARKER_ENV = "TOOLORCHESTRA_SANDBOX_ID"
"""Environment variable carrying the call's id into the child (finds escapees, see above)."""
KILL_GRACE_S = 2.0
"""How long to wait, after killing, for pipes to close and processes to vanish."""


# --------------------------------------------------------------------------- /proc scans
def _proc_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def uid_pids(uid: int) -> dict[int, int]:
    """Live (non-zombie) processes owned by `uid`, each with its process group id."""
    found = {}
    for pid in _proc_pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()  # the name may hold spaces and ")"
        except OSError:
            continue  # gone meanwhile
        if fields[0] not in (b"Z", b"X"):
            found[pid] = int(fields[3])
    return found


def user_task_count(uid: int) -> int:
    """Processes and threads of `uid` now: what RLIMIT_NPROC counts."""
    count = 0
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                fields = dict(line.split(b":", 1) for line in fh.read().splitlines() if b":" in line)
        except OSError:
            continue
        if int(fields[b"Uid"].split()[0]) == uid:
            count += int(fields[b"Threads"])
    return count


def marked_pids(marker: bytes) -> list[int]:
    """Our own-uid processes whose initial environment carries this call's marker."""
    pids = []
    for pid in _proc_pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if marker in fh.read():
                    pids.append(pid)
        except OSError:
            continue
    return pids


# --------------------------------------------------------------------------- the uid pool
def uid_extents() -> list[tuple[int, int]]:
    """The uid ranges [first, end) valid in this user namespace (setuid to others fails)."""
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
    except OSError:
        return [(0, 2**32 - 1)]
    return [(int(f[0]), int(f[0]) + int(f[2])) for f in (line.split() for line in lines) if len(f) == 3]


def default_uid_base(count: int) -> int:
    """DEFAULT_UID_BASE when mapped (the initial namespace, most containers); else the top of the
    largest mapped range, below 65534/65535 (nobody and the 16-bit -1) when it ends there."""
    extents = uid_extents()
    if any(first <= DEFAULT_UID_BASE and DEFAULT_UID_BASE + count <= end for first, end in extents):
        return DEFAULT_UID_BASE
    first, end = max(extents, key=lambda e: e[1] - e[0])
    top = min(end, 65534) if end <= 65536 else end
    return max(first + 1, top - count)


class UidLease:
    """Exclusive use of one sandbox uid, held by binding an abstract unix socket named after it."""

    def __init__(self, base: int, count: int) -> None:
        self.uid: int | None = None
        self._sock: socket.socket | None = None
        start = secrets.randbelow(count)
        for i in range(count):
            uid = base + (start + i) % count
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                sock.bind(f"\0toolorchestra-sandbox-uid-{uid}")
            except OSError:
                sock.close()
                continue  # another call holds it
            try:
                pwd.getpwuid(uid)
                taken = True  # a real account: never ours to kill
            except KeyError:
                taken = bool(uid_pids(uid))  # someone else runs as it
            if taken:
                sock.close()
                continue
            self.uid, self._sock = uid, sock
            return
        raise ToolError(
            f"code_interpreter: all {count} sandbox uids from {base} are busy or in use; "
            "wait for running calls or raise sandbox_uid_count"
        )

    def release(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


# --------------------------------------------------------------------------- killing
@functools.cache
def _reaper_source() -> str:
    return resources.files("toolorchestra.tools.sandbox").joinpath("reaper.py").read_text(encoding="utf-8")


def kill_all(proc: subprocess.Popen[bytes], uid: int | None, call_id: str) -> int:
    """SIGKILL the child's process group and every process that escaped it; count escapees."""
    left = {} if uid is None else {pid: pgid for pid, pgid in uid_pids(uid).items() if pid != proc.pid}
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    killed = 0
    if uid is not None:
        killed = len(left)
        if any(pgid != proc.pid for pgid in left.values()):
            # Some left the process group (setsid): only kill(-1) as the uid reaches them all.
            try:
                subprocess.run(
                    [sys.executable, "-I", "-S", "-c", _reaper_source(), str(uid)],
                    env={},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("code_interpreter: the reaper for uid %s failed: %s", uid, exc)
        end = time.monotonic() + KILL_GRACE_S
        while uid_pids(uid) and time.monotonic() < end:
            time.sleep(0.005)
        return killed
    marker = f"{MARKER_ENV}={call_id}".encode()
    for _ in range(50):
        left = [p for p in marked_pids(marker) if p != proc.pid]
        if not left:
            break
        killed += len(left)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)
    return killed
