"""The `code_interpreter` tool: run model-written Python in a separate, limited, throw-away process.

Each call starts `sys.executable -I -u -c <launcher>` (the same interpreter, isolated mode: no
PYTHONPATH, no user site, no current folder on the path) in a new session, sends a bootstrap and
then the code on stdin, and returns the exit status, stdout and stderr (each cut to `max_output_bytes` in all,
keeping the head and the tail so a final traceback stays visible). The child runs in a fresh
empty working folder (also its HOME and TMPDIR) that is deleted afterwards, with a minimal
environment, so the caller's secrets (API keys, tokens) never reach it.

How the child is contained, layer by layer (the bootstrap sets each up before the code runs):

* **Time.** The parent enforces the wall-time limit and RLIMIT_CPU bounds CPU time. The child
  leads its own process group (new session); when the code finishes or the time is up, the whole
  group is SIGKILLed, so an infinite loop never outlives the call.
* **Memory.** RLIMIT_DATA caps each process's private writable memory (heap, anonymous maps)
  at `memory_mb`, and RLIMIT_AS (4x by default) backs it up for shared mappings. RLIMIT_AS alone
  would count mapped shared libraries and break big imports (torch maps ~0.8 GiB). Python
  raises MemoryError and the observation says the memory limit was hit.
* **Processes.** RLIMIT_NPROC caps the processes (threads count too) of the child's real uid. The
  kernel does not enforce it for root, and the tests and CI run as root, so a root caller drops
  the child to a *dedicated* unprivileged uid (taken from a pool, `sandbox_uid_base` onwards, no
  account of that number, no process running as it, and locked per call through an abstract
  unix socket so concurrent calls and other processes never share one). Then RLIMIT_NPROC holds,
  and after the call every process of that uid is killed with `kill(-1, SIGKILL)` sent *as* that
  uid: the kernel delivers it atomically to all of them, including descendants that left the
  process group with setsid() (the usual fork-bomb escape). PR_SET_NO_NEW_PRIVS stops setuid
  binaries from regaining privileges. A non-root caller cannot change uid: the limit becomes
  "the processes the user already has + max_processes", the group is killed, and escapees are
  found by a per-call marker in their environment (best effort, stated in `data["isolation"]`).
* **Network.** Preferred: a new, empty network namespace (unshare(CLONE_NEWNET); non-root callers
  add CLONE_NEWUSER), where not even loopback is up, so nothing can connect anywhere, whatever
  the code does (ctypes, subprocesses). Always, as defence in depth: a Python audit hook, which
  cannot be removed, refuses socket connect/bind/sendto/sendmsg. Where namespaces are not
  permitted (e.g. Docker's default seccomp profile) the hook is the only layer, and the hook then
  also refuses starting programs (exec, spawn, subprocess), since a new interpreter would not
  carry it. An audit hook is not a security boundary (ctypes can go around it); which layer is
  active is reported in every call's `data["isolation"]["network"]` ("netns" or "audit-hook").
* **Files.** The uid owns only its working folder; elsewhere it has what any other user has
  (world-readable files, world-writable /tmp). When the interpreter lives where other users
  cannot read it (pyenv under a 0700 /root, as on this project's machines), the child, still
  root, makes a private mount namespace, lays a small tmpfs over the blocking folder and
  bind-mounts only the interpreter's prefixes back; this also hides the rest of that folder.
  Without mount namespaces such a setup is refused with a message saying how to fix it.

Departure from the paper: ToolOrchestra runs its code interpreter as a remote sandbox service;
here it is a local process with kernel limits, good for the embedded profile and CI. Files written
to world-writable folders outside the working folder (/tmp, /dev/shm) are limited in size
(RLIMIT_FSIZE) but not removed.

Use:

    tool = CodeInterpreter(SandboxLimits(wall_time_s=10, memory_mb=512))
    out = tool.run({"code": "print(2 ** 10)"})   # out.content: "exit status: 0\n--- stdout ---\n1024"

One trivial call (`print(1)`) costs about 40 ms on this project's 2-core machine: the child
interpreter's start-up plus the namespace and rlimit setup (measured by the test module's
`test_trivial_call_overhead`, run with `-s`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pwd
import secrets
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from toolorchestra.tools.base import Tool, ToolError, ToolOutput

log = logging.getLogger(__name__)

DEFAULT_UID_BASE = 2_000_000_000
"""First sandbox uid for a root caller: inside the range systemd documents as unused."""
MARKER_ENV = "TOOLORCHESTRA_SANDBOX_ID"
"""Environment variable carrying the call's id into the child (finds escapees, see above)."""
_KILL_GRACE_S = 2.0
"""How long to wait, after killing, for pipes to close and processes to vanish."""


class SandboxLimits(BaseModel):
    """Resource limits of one code-interpreter call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    wall_time_s: float = Field(10.0, gt=0, le=3600)
    cpu_time_s: float | None = Field(None, gt=0, le=3600)
    """CPU seconds per process (RLIMIT_CPU); None means one second more than `wall_time_s`."""
    memory_mb: int = Field(512, ge=32)
    """Private writable memory per process (RLIMIT_DATA: heap and anonymous mappings), in MiB."""
    address_space_mb: int | None = Field(None, ge=32)
    """Backstop for what RLIMIT_DATA does not count (shared mappings), as RLIMIT_AS in MiB; None
    means 4 x memory_mb. Address space is far larger than memory in use (shared libraries: torch
    alone maps about 0.8 GiB), so it cannot be the main limit."""
    max_output_bytes: int = Field(8000, ge=256)
    """Bytes of stdout + stderr shown in the observation; the rest is cut out and counted."""
    max_processes: int = Field(32, ge=1, le=4096)
    """Processes and threads the code may have at once (RLIMIT_NPROC), itself included."""
    max_file_mb: int = Field(64, ge=1)
    """Largest file the code may write (RLIMIT_FSIZE), in MiB."""

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


# --------------------------------------------------------------------------- the child's side
# Arrives on stdin ahead of the code (see _LAUNCH) and runs as the caller's user at first. It
# reports its setup as one JSON line on the status pipe before running the code.
_BOOTSTRAP = r'''
import json, os, sys

def _setup(cfg, status_fd):
    import ctypes, resource, signal
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
    MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18

    def fail(what):
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(src, target, fstype, flags, data):
        enc = lambda s: None if s is None else os.fsencode(s)
        if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
            fail(f"mount {target}")

    info = {"network": "audit-hook", "uid": None, "mount_namespace": False}
    if cfg["mounts"]:
        # Root only: make the interpreter readable for the sandbox uid (see the module docstring).
        if libc.unshare(CLONE_NEWNS) != 0:
            fail("unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing below leaks to the host
        for top, paths in cfg["mounts"]:
            fds = [os.open(p, os.O_PATH | os.O_DIRECTORY) for p in paths]  # before covering
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
            for p, fd in zip(paths, fds):
                os.makedirs(p, mode=0o755, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC, None)
                os.close(fd)
        info["mount_namespace"] = True
    if cfg["netns"]:
        flags = CLONE_NEWNET if os.geteuid() == 0 else CLONE_NEWNET | CLONE_NEWUSER
        if libc.unshare(flags) == 0:
            info["network"] = "netns"
        else:
            info["netns_error"] = os.strerror(ctypes.get_errno())

    soft_cpu = cfg["cpu_s"]
    resource.setrlimit(resource.RLIMIT_CPU, (soft_cpu, soft_cpu + 1))  # SIGXCPU, then SIGKILL
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["fsize"], cfg["fsize"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (cfg["nproc"], cfg["nproc"]))
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setresgid(cfg["uid"], cfg["uid"], cfg["uid"])
        os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
        if os.getuid() != cfg["uid"] or os.geteuid() != cfg["uid"]:
            raise OSError(f"could not drop privileges to uid {cfg['uid']}")
        os.listdir(cfg["stdlib"])  # fails loudly here rather than at the code's first import
    info["uid"] = os.getuid()
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: setuid programs gain nothing
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the caller
    if os.getppid() != cfg["parent_pid"]:
        os._exit(137)  # the caller died before PDEATHSIG was armed
    os.chdir(cfg["workdir"])
    os.umask(0o022)
    # Last, as the setup above needs memory.
    resource.setrlimit(resource.RLIMIT_DATA, (cfg["memory"], cfg["memory"]))
    resource.setrlimit(resource.RLIMIT_AS, (cfg["address_space"], cfg["address_space"]))
    return info

def _install_audit_hook(block_spawn):
    net = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})
    spawn = frozenset({"os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen", "pty.spawn"})
    def hook(event, args):
        if event in net:
            raise PermissionError("network access is disabled in the code interpreter")
        if block_spawn and event in spawn:
            raise PermissionError("starting programs is disabled in the code interpreter")
    sys.addaudithook(hook)

def _main():
    cfg = json.loads(sys.argv[2])
    status_fd = cfg["status_fd"]
    os.set_inheritable(status_fd, False)  # programs the code starts do not get it
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    try:
        info = _setup(cfg, status_fd)
    except BaseException as exc:
        os.write(status_fd, (json.dumps({"event": "setup_failed", "error": repr(exc)}) + "\n").encode())
        os._exit(2)
    _install_audit_hook(block_spawn=info["network"] != "netns")
    os.write(status_fd, (json.dumps({"event": "ready", **info}) + "\n").encode())
    memory_note = b'{"event": "memory"}\n'

    import builtins, linecache, traceback, types
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    sys.argv = ["<code>"]
    sys.path.insert(0, cfg["workdir"])
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main  # so pickling (multiprocessing) finds the code's names
    try:
        exec(compile(code, "<code>", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        if isinstance(exc, MemoryError):
            os.write(status_fd, memory_note)
            main.__dict__.clear()  # free what the code holds so the traceback can be printed
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # hide this frame
        traceback.print_exception(type(exc), exc, tb)
        sys.exit(1)

_main()
'''
_BOOTSTRAP_BYTES = _BOOTSTRAP.encode("utf-8")

_REAPER = r'''
import os, sys
uid = int(sys.argv[1])
os.setgroups([])
os.setresgid(uid, uid, uid)
os.setresuid(uid, uid, uid)  # from here on, kill(-1) reaches exactly this uid's processes
for _ in range(1000):
    try:
        os.kill(-1, 9)  # atomic over all of them, so a fork bomb cannot outrun it
    except ProcessLookupError:
        break
'''
"""Started as root and dropping to the sandbox uid itself: the uid may be unable to read the
interpreter outside the child's mount namespace."""

_LAUNCH = "import sys; exec(compile(sys.stdin.buffer.read(int(sys.argv[1])), '<sandbox>', 'exec'))"
"""The child's command line: the bootstrap and then the code arrive on stdin (short `ps` lines)."""


# --------------------------------------------------------------------------- the caller's side
@dataclass
class _Stream:
    """Keeps the first and last bytes of a stream and counts the rest."""

    keep: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - self.keep)]

    def render(self, budget: int) -> tuple[str, bool]:
        """The stream cut to `budget` bytes (its head and its tail), and whether anything was cut."""
        if self.total <= budget:  # budget <= keep, so it all sits in `head`
            return self.head.decode("utf-8", "replace"), False
        head_n = budget // 2
        tail_n = budget - head_n
        # head + tail is the whole stream whenever tail holds fewer than tail_n bytes.
        tail = (bytes(self.head) + bytes(self.tail))[-tail_n:]
        omitted = self.total - head_n - tail_n
        text = (
            self.head[:head_n].decode("utf-8", "replace")
            + f"\n... [{omitted} bytes cut] ...\n"
            + tail.decode("utf-8", "replace")
        )
        return text, True


@dataclass
class _Run:
    call_id: str
    stdout: _Stream
    stderr: _Stream
    returncode: int = 0
    timed_out: bool = False
    setup: dict[str, Any] = field(default_factory=dict)
    memory_error: bool = False
    survivors_killed: int = 0
    duration_s: float = 0.0


def _proc_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _uid_pids(uid: int) -> dict[int, int]:
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


def _user_task_count(uid: int) -> int:
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


def _marked_pids(marker: bytes) -> list[int]:
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


def _uid_extents() -> list[tuple[int, int]]:
    """The uid ranges [first, end) valid in this user namespace (setuid to others fails)."""
    try:
        lines = Path("/proc/self/uid_map").read_text().splitlines()
    except OSError:
        return [(0, 2**32 - 1)]
    return [(int(f[0]), int(f[0]) + int(f[2])) for f in (line.split() for line in lines) if len(f) == 3]


def _default_uid_base(count: int) -> int:
    """DEFAULT_UID_BASE when mapped (the initial namespace, most containers); else the top of the
    largest mapped range, below 65534/65535 (nobody and the 16-bit -1) when it ends there."""
    extents = _uid_extents()
    if any(first <= DEFAULT_UID_BASE and DEFAULT_UID_BASE + count <= end for first, end in extents):
        return DEFAULT_UID_BASE
    first, end = max(extents, key=lambda e: e[1] - e[0])
    top = min(end, 65534) if end <= 65536 else end
    return max(first + 1, top - count)


def _blocking_folder(path: str) -> str | None:
    """The top-most folder on `path` that other users cannot enter, if any."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = str(Path(*parts[:i]))
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder
    return None


def _interpreter_mounts() -> list[tuple[str, list[str]]]:
    """Folders to bind back over tmpfs so an unprivileged uid can run this interpreter.

    Raises ToolError when a needed folder itself is closed to other users (nothing to bind).
    """
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths = {os.path.realpath(p) for p in paths if os.path.isdir(p)}
    # Nested paths are covered by their ancestor's bind mount.
    roots = sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths))
    mounts: dict[str, list[str]] = {}
    for p in roots:
        top = _blocking_folder(p)
        if top is None:
            continue
        if os.stat(p).st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
            raise ToolError(
                f"code_interpreter: the interpreter folder {p} is closed to other users; run `chmod o+rx {p}`"
            )
        mounts.setdefault(top, []).append(p)
    return sorted(mounts.items())


class _UidLease:
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
                taken = bool(_uid_pids(uid))  # someone else runs as it
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


def _remove_tree(path: str) -> None:
    """rmtree that also removes what the code made unreadable or read-only (chmod 000)."""

    def fix_and_retry(_func: Any, failed: str, exc_info: Any) -> None:
        if not issubclass(exc_info[0], PermissionError):
            raise exc_info[1]
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
            shutil.rmtree(failed, onerror=fix_and_retry)
        else:
            os.unlink(failed)

    shutil.rmtree(path, onerror=fix_and_retry)


class CodeInterpreter(Tool):
    """Runs Python code in a limited child process and returns what it printed."""

    name = "code_interpreter"
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "code": {
                "type": "string",
                "description": (
                    "A complete Python 3 program. Print the values you need; "
                    "only stdout and stderr come back."
                ),
            }
        },
        "required": ["code"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        network_namespace: bool = True,
        sandbox_uid_base: int | None = None,
        sandbox_uid_count: int = 64,
        workdir_parent: str | Path | None = None,
    ) -> None:
        """`network_namespace=False` leaves only the audit-hook network layer (for tests and for
        hosts where unshare is audited). The uid pool (`sandbox_uid_count` uids from
        `sandbox_uid_base`) matters only to a root caller: it must be numbers no account or
        other program uses; None picks DEFAULT_UID_BASE, or the top of a container's uid map.
        `workdir_parent` (default: the temp folder) must be enterable by other users."""
        self.limits = limits or SandboxLimits()
        self.network_namespace = network_namespace
        self.workdir_parent = str(Path(workdir_parent or tempfile.gettempdir()).resolve())
        if not sys.platform.startswith("linux"):
            raise ToolError(
                f"code_interpreter: needs Linux (rlimits, /proc, namespaces); this is {sys.platform}"
            )
        if not sys.executable:
            raise ToolError("code_interpreter: sys.executable is empty; cannot start a child interpreter")
        self._warned_no_netns = False
        self.as_root = os.geteuid() == 0
        self._mounts: list[tuple[str, list[str]]] = []
        if self.as_root:
            if sandbox_uid_base is None:
                sandbox_uid_base = _default_uid_base(sandbox_uid_count)
            last = sandbox_uid_base + sandbox_uid_count - 1
            valid = any(first <= sandbox_uid_base and last < end for first, end in _uid_extents())
            if sandbox_uid_count < 1 or sandbox_uid_base < 1 or not valid:
                raise ToolError(
                    f"code_interpreter: sandbox uids {sandbox_uid_base}..{last} are not valid in this "
                    "user namespace (see /proc/self/uid_map); pass a free range as sandbox_uid_base"
                )
            self._mounts = _interpreter_mounts()
            if _blocking_folder(os.path.join(self.workdir_parent, "x")) is not None:
                raise ToolError(
                    f"code_interpreter: the sandbox user cannot reach {self.workdir_parent}; "
                    "pass a world-searchable workdir_parent (e.g. /tmp)"
                )
        self.sandbox_uid_base = sandbox_uid_base
        self.sandbox_uid_count = sandbox_uid_count
        lim = self.limits
        self.description = (
            "Run a Python 3 program in a sandbox and get its exit status, stdout and stderr. "
            f"Limits: {lim.wall_time_s:g} s, {lim.memory_mb} MB memory, {lim.max_output_bytes} bytes of "
            "output shown; no network; a fresh empty working folder; each call starts from scratch "
            "(no state is kept). numpy and the standard library are available."
        )

    # ------------------------------------------------------------------ public
    def run(self, arguments: dict[str, Any]) -> ToolOutput:
        code = arguments.get("code") if isinstance(arguments, dict) else None
        if not isinstance(code, str):
            raise ToolError('code_interpreter: argument "code" must be a string holding a Python program')
        if not code.strip():
            raise ToolError(
                'code_interpreter: argument "code" is empty; send a Python program that prints its result'
            )
        lease = None
        if self.as_root:
            assert self.sandbox_uid_base is not None  # set by __init__ for a root caller
            lease = _UidLease(self.sandbox_uid_base, self.sandbox_uid_count)
        workdir = tempfile.mkdtemp(prefix="toolorchestra-code-", dir=self.workdir_parent)
        try:
            if lease is not None:
                assert lease.uid is not None
                os.chown(workdir, lease.uid, lease.uid)
            os.chmod(workdir, 0o700)
            result = self._execute(code, workdir, None if lease is None else lease.uid)
        finally:
            try:
                _remove_tree(workdir)
            finally:
                if lease is not None:
                    lease.release()
        return self._observation(result, None if lease is None else lease.uid)

    # ------------------------------------------------------------------ the call
    def _env(self, workdir: str, call_id: str) -> dict[str, str]:
        # A minimal environment: nothing of the caller's (keys, tokens) is passed on.
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "USER": "sandbox",  # the uid has no account: getpass.getuser() reads these first
            "LOGNAME": "sandbox",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": workdir,
            # BLAS thread pools would count against max_processes and the memory limit.
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            MARKER_ENV: call_id,
        }

    def _execute(self, code: str, workdir: str, uid: int | None) -> _Run:
        lim = self.limits
        call_id = secrets.token_hex(8)
        nproc = lim.max_processes
        if uid is None:  # the limit counts every process of the caller's user, not just ours
            nproc += _user_task_count(os.getuid())
        status_r, status_w = os.pipe()
        cfg = {
            "id": call_id,  # on the command line, so tests and operators can spot the process
            "status_fd": status_w,
            "workdir": workdir,
            "uid": uid,
            "netns": self.network_namespace,
            "mounts": self._mounts if uid is not None else [],
            "stdlib": sysconfig.get_paths()["stdlib"],
            "parent_pid": os.getpid(),
            "cpu_s": lim.cpu_seconds,
            "memory": lim.memory_mb * 2**20,
            "address_space": lim.address_space_bytes,
            "fsize": lim.max_file_mb * 2**20,
            "nproc": nproc,
        }
        run = _Run(call_id, _Stream(lim.max_output_bytes), _Stream(lim.max_output_bytes))
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-u", "-c", _LAUNCH, str(len(_BOOTSTRAP_BYTES)), json.dumps(cfg)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                env=self._env(workdir, call_id),
                cwd=workdir,
                start_new_session=True,  # its own process group, killed as one
            )
        except OSError as exc:
            os.close(status_r)
            raise ToolError(f"code_interpreter: could not start {sys.executable}: {exc}") from exc
        finally:
            os.close(status_w)
        io = _ChildIO(proc, _BOOTSTRAP_BYTES + code.encode("utf-8"), status_r, run)
        try:
            run.timed_out = not io.pump(started + lim.wall_time_s, stop_on_exit=True)
        finally:
            # Whether the code finished, timed out or we are being interrupted: nothing survives.
            run.survivors_killed = _kill_all(proc, uid, call_id)
            io.pump(time.monotonic() + _KILL_GRACE_S, stop_on_exit=False)  # drain what is left
            io.close()
            run.returncode = proc.wait()
            run.duration_s = time.monotonic() - started
        return run

    # ------------------------------------------------------------------ the observation
    def _observation(self, run: _Run, uid: int | None) -> ToolOutput:
        lim = self.limits
        if run.setup.get("event") != "ready" and not run.timed_out:
            reason = run.setup.get("error") or f"the child exited with status {run.returncode} early"
            if "CLONE_NEWNS" in reason:
                closed = ", ".join(top for top, _ in self._mounts)
                reason += (
                    f" (the interpreter lies under {closed}, which other users cannot enter, and mount "
                    "namespaces are not permitted here: make the interpreter world-readable or use one "
                    "outside it)"
                )
            err = run.stderr.render(2000)[0].strip()
            detail = f"; stderr: {err}" if err else ""
            raise ToolError(f"code_interpreter: the sandbox could not be set up: {reason}{detail}")
        stderr_tail = bytes(run.stderr.tail or run.stderr.head)
        signal_name = None
        if run.returncode < 0:
            try:
                signal_name = signal.Signals(-run.returncode).name
            except ValueError:
                signal_name = f"signal {-run.returncode}"
        memory = run.memory_error or (
            run.returncode != 0 and (b"MemoryError" in stderr_tail or b"[Errno 12]" in stderr_tail)
        )
        # EAGAIN from fork/clone is what RLIMIT_NPROC looks like from inside.
        process_limit = run.returncode != 0 and (
            (b"[Errno 11]" in stderr_tail and b"fork" in stderr_tail)
            or b"can't start new thread" in stderr_tail
        )
        notes = []
        if run.timed_out:
            status_line = f"stopped: the wall-time limit of {lim.wall_time_s:g} s was reached"
            notes.append("the program and all the processes it started were killed")
        elif signal_name is not None:
            status_line = f"killed by {signal_name}"
            if signal_name in ("SIGXCPU", "SIGKILL"):
                notes.append(f"the CPU-time limit is {lim.cpu_seconds} s per process")
        else:
            status_line = f"exit status: {run.returncode}"
        if memory:
            notes.append(f"the memory limit of {lim.memory_mb} MB was exceeded (MemoryError)")
        if process_limit:
            notes.append(f"the process limit ({lim.max_processes} processes and threads) was reached")
        if run.survivors_killed and not run.timed_out:
            notes.append(f"{run.survivors_killed} leftover process(es) were killed when the program ended")

        budget = lim.max_output_bytes
        if run.stdout.total + run.stderr.total <= budget:
            out_budget, err_budget = run.stdout.total, run.stderr.total
        else:  # share the budget; a stream that needs less leaves the rest to the other
            err_budget = min(run.stderr.total, max(budget // 2, budget - run.stdout.total))
            out_budget = budget - err_budget
        out, out_cut = run.stdout.render(out_budget)
        err, err_cut = run.stderr.render(err_budget)
        lines = [status_line] + [f"note: {n}" for n in notes]
        if out:
            lines += ["--- stdout ---", out.rstrip("\n")]
        if err:
            lines += ["--- stderr ---", err.rstrip("\n")]
        if not out and not err:
            lines.append("(no output)")
        if out_cut or err_cut:
            lines.append(
                f"note: output was truncated to {budget} bytes "
                f"(stdout {run.stdout.total} B, stderr {run.stderr.total} B)"
            )

        isolation = {
            "network": run.setup.get("network", "unknown"),
            "network_error": run.setup.get("netns_error"),
            "uid": run.setup.get("uid"),
            "processes": (
                "dedicated uid + RLIMIT_NPROC + kill(-1) as that uid"
                if uid is not None
                else "RLIMIT_NPROC above the user's count + process group + environment marker (best effort)"
            ),
            "mount_namespace": run.setup.get("mount_namespace", False),
        }
        if isolation["network"] != "netns" and not self._warned_no_netns:
            self._warned_no_netns = True
            log.warning(
                "code_interpreter: no network namespace (%s); only the audit hook blocks sockets",
                isolation["network_error"] or "disabled",
            )
        return ToolOutput(
            content="\n".join(lines),
            ok=not run.timed_out and run.returncode == 0,
            data={
                "exit_code": run.returncode if run.returncode >= 0 else None,
                "signal": signal_name,
                "timed_out": run.timed_out,
                "memory_exceeded": memory,
                "process_limit_hit": process_limit,
                "stdout_bytes": run.stdout.total,
                "stderr_bytes": run.stderr.total,
                "truncated": out_cut or err_cut,
                "duration_s": round(run.duration_s, 4),
                "survivors_killed": run.survivors_killed,
                "sandbox_id": run.call_id,
                "isolation": isolation,
            },
        )


class _ChildIO:
    """Feeds the child's stdin and collects stdout, stderr and the status pipe without blocking."""

    def __init__(self, proc: subprocess.Popen[bytes], code: bytes, status_r: int, run: _Run) -> None:
        assert proc.stdin and proc.stdout and proc.stderr
        self.proc, self.code, self.run, self.sent, self.status_r = proc, code, run, 0, status_r
        self.status = bytearray()
        self.sel = selectors.DefaultSelector()
        self.sinks = {
            proc.stdout.fileno(): run.stdout.feed,
            proc.stderr.fileno(): run.stderr.feed,
            status_r: self.status.extend,
        }
        for fd in self.sinks:
            self.sel.register(fd, selectors.EVENT_READ)
        self.stdin_fd = proc.stdin.fileno()
        os.set_blocking(self.stdin_fd, False)  # a child that never reads must not hang us
        self.sel.register(self.stdin_fd, selectors.EVENT_WRITE)
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(proc.pid)  # readable once the child exits: no polling
            self.sel.register(self.pidfd, selectors.EVENT_READ)
        except (AttributeError, OSError):
            self.pidfd = None

    def _exited(self) -> bool:
        # WNOWAIT leaves the child unreaped, so its pid (= its process group id) stays reserved
        # until the group has been killed.
        try:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            return os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:
            return True

    def pump(self, until: float, *, stop_on_exit: bool) -> bool:
        """Move data until the child exits (stop_on_exit) or every pipe is closed; False on `until`."""
        if not stop_on_exit and self.pidfd is not None:
            self.sel.unregister(self.pidfd)  # stays readable after the exit: would spin
            os.close(self.pidfd)
            self.pidfd = None
        while True:
            if stop_on_exit and self._exited():
                return True
            if not stop_on_exit and not any(fd in self.sel.get_map() for fd in self.sinks):
                return True
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            wait = remaining if (self.pidfd is not None or not stop_on_exit) else min(remaining, 0.02)
            for key, _ in self.sel.select(wait):
                if key.fd == self.stdin_fd:
                    self._write_stdin()
                elif key.fd in self.sinks:
                    data = os.read(key.fd, 65536)
                    if data:
                        self.sinks[key.fd](data)
                    else:
                        self.sel.unregister(key.fd)

    def _write_stdin(self) -> None:
        try:
            self.sent += os.write(self.stdin_fd, self.code[self.sent : self.sent + 65536])
        except BlockingIOError:
            return
        except BrokenPipeError:
            self.sent = len(self.code)  # the child stopped reading (it died): nothing more to send
        if self.sent >= len(self.code):
            self.sel.unregister(self.stdin_fd)
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def close(self) -> None:
        self.sel.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        os.close(self.status_r)
        for line in bytes(self.status).splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # the code may scribble on the inherited pipe; only our lines count
            if not isinstance(event, dict):
                continue
            if event.get("event") in ("ready", "setup_failed") and not self.run.setup:
                self.run.setup = event
            elif event.get("event") == "memory":
                self.run.memory_error = True


def _kill_all(proc: subprocess.Popen[bytes], uid: int | None, call_id: str) -> int:
    """SIGKILL the child's process group and every process that escaped it; count escapees."""
    left = {} if uid is None else {pid: pgid for pid, pgid in _uid_pids(uid).items() if pid != proc.pid}
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
                    [sys.executable, "-I", "-S", "-c", _REAPER, str(uid)],
                    env={},
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=10,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("code_interpreter: the reaper for uid %s failed: %s", uid, exc)
        end = time.monotonic() + _KILL_GRACE_S
        while _uid_pids(uid) and time.monotonic() < end:
            time.sleep(0.005)
        return killed
    marker = f"{MARKER_ENV}={call_id}".encode()
    for _ in range(50):
        left = [p for p in _marked_pids(marker) if p != proc.pid]
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
