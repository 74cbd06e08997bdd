"""Running one sandboxed process: start the child, feed it, collect its output, kill what is left.

`execute` starts `sys.executable -I -u -c LAUNCH` in a new session with the bootstrap
(`child.py`) and the code on stdin, moves data between the pipes without blocking (`ChildIO`)
until the child exits or the wall time is up, then kills the whole call (`processes.kill_all`) and
returns a `SandboxRun`: exit status, the head and tail of stdout and stderr (`Stream`), and the
child's setup report. `remove_tree` deletes the call's working folder afterwards.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from toolorchestra.tools.base import ToolError
from toolorchestra.tools.sandbox.isolation import child_env
from toolorchestra.tools.sandbox.limits import SandboxLimits
from toolorchestra.tools.sandbox.processes import KILL_GRACE_S, kill_all, user_task_count

LAUNCH = "import sys; exec(compile(sys.stdin.buffer.read(int(sys.argv[1])), '<sandbox>', 'exec'))"
"""The child's command line: the bootstrap and then the code arrive on stdin (short `ps` lines)."""


@functools.cache
def bootstrap() -> bytes:
    """The text of `child.py`, sent ahead of the code (a sandbox uid may be unable to read it)."""
    return resources.files("toolorchestra.tools.sandbox").joinpath("child.py").read_bytes()


@dataclass
class Stream:
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
class SandboxRun:
    """What one call left behind: exit status, output, the child's setup report, cleanup counts."""

    call_id: str
    stdout: Stream
    stderr: Stream
    returncode: int = 0
    timed_out: bool = False
    setup: dict[str, Any] = field(default_factory=dict)
    memory_error: bool = False
    survivors_killed: int = 0
    duration_s: float = 0.0


def execute(
    code: str,
    workdir: str,
    uid: int | None,
    limits: SandboxLimits,
    *,
    network_namespace: bool,
    mounts: list[tuple[str, str, list[str]]],
    preload: str | None = None,
) -> SandboxRun:
    """Run `code` in a child in `workdir` (as `uid` when set) and return once nothing of it is left.
    `preload`: a module in `workdir` whose `__all__` names the code finds defined."""
    call_id = secrets.token_hex(8)
    nproc = limits.max_processes
    if uid is None:  # the limit counts every process of the caller's user, not just ours
        nproc += user_task_count(os.getuid())
    boot = bootstrap()  # before the pipe: a failure here leaks nothing
    status_r, status_w = os.pipe()
    cfg = {
        "id": call_id,  # on the command line, so tests and operators can spot the process
        "status_fd": status_w,
        "workdir": workdir,
        "uid": uid,
        "netns": network_namespace,
        "mounts": mounts if uid is not None else [],
        "stdlib": sysconfig.get_paths()["stdlib"],
        "parent_pid": os.getpid(),
        "cpu_s": limits.cpu_seconds,
        "memory": limits.memory_mb * 2**20,
        "address_space": limits.address_space_bytes,
        "fsize": limits.max_file_mb * 2**20,
        "nproc": nproc,
        "preload": preload,
    }
    run = SandboxRun(call_id, Stream(limits.max_output_bytes), Stream(limits.max_output_bytes))
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-u", "-c", LAUNCH, str(len(boot)), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_w,),
            env=child_env(workdir, call_id),
            cwd=workdir,
            start_new_session=True,  # its own process group, killed as one
        )
    except OSError as exc:
        os.close(status_r)
        raise ToolError(f"code_interpreter: could not start {sys.executable}: {exc}") from exc
    finally:
        os.close(status_w)
    io = ChildIO(proc, boot + code.encode("utf-8"), status_r, run)
    try:
        run.timed_out = not io.pump(started + limits.wall_time_s, stop_on_exit=True)
    finally:
        # Whether the code finished, timed out or we are being interrupted: nothing survives.
        run.survivors_killed = kill_all(proc, uid, call_id)
        io.pump(time.monotonic() + KILL_GRACE_S, stop_on_exit=False)  # drain what is left
        io.close()
        run.returncode = proc.wait()
        run.duration_s = time.monotonic() - started
    return run


class ChildIO:
    """Feeds the child's stdin and collects stdout, stderr and the status pipe without blocking."""

    def __init__(self, proc: subprocess.Popen[bytes], code: bytes, status_r: int, run: SandboxRun) -> None:
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


def remove_tree(path: str) -> None:
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
