"""The `code_interpreter` tool: run model-written Python in a separate, limited, throw-away process.

`CodeInterpreter` checks the arguments, leases a sandbox uid (root callers), makes the call's
empty working folder, runs the code there and returns its exit status, stdout and stderr as the
observation. The sandbox itself, and how it contains the code (time, memory, processes, network,
files) and departs from the paper, is in `toolorchestra.tools.sandbox` (see its docstring).

Use:

    tool = CodeInterpreter(SandboxLimits(wall_time_s=10, memory_mb=512))
    out = tool.run({"code": "print(2 ** 10)"})   # out.content: "exit status: 0\n--- stdout ---\n1024"

With `final_answer_line`, a run that succeeds and prints one line holding a value (`answer_line`)
ends the task with that line as the answer (`data["final"]`, as an `ask_program` run): the policy's
next turn would only reread its whole prompt to repeat the line (on the 2026-12-07 demos about 640
of the 1,180 prompt tokens of "What is 17 * 23?"). Output to read (several lines, a record, a
list, None) still comes back as an observation.

One trivial call (`print(1)`) costs about 40 ms on this project's 2-core machine: the child
interpreter's start-up plus the namespace and rlimit setup (measured by the test module's
`test_trivial_call_overhead`, run with `-s`).
"""

from __future__ import annotations

import ast
import copy
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from toolorchestra.tools.base import Tool, ToolError, ToolOutput
from toolorchestra.tools.sandbox.isolation import blocking_folder, call_mounts, default_hidden_paths, interpreter_mounts
from toolorchestra.tools.sandbox.limits import SandboxLimits
from toolorchestra.tools.sandbox.observation import observe
from toolorchestra.tools.sandbox.processes import UidLease, default_uid_base, uid_extents
from toolorchestra.tools.sandbox.runner import execute, remove_tree

__all__ = ["CodeInterpreter", "SandboxLimits", "answer_line"]

log = logging.getLogger(__name__)

ANSWER_LINE_CHARS = 200
NO_VALUE = {"none", "null", "nan", ""}


def answer_line(stdout: str) -> str | None:
    r"""The answer a program printed, when its output is one line holding a value: a number, a
    word or short text (at most ANSWER_LINE_CHARS). None for anything to read on: several lines,
    None/nan, or a Python container (a record as a dict, a list of rows).

    >>> [answer_line(o) for o in ("391\n", "Lima", "1\n2\n", "None", "{'id': 'A1'}", "[]", "'x'")]
    ['391', 'Lima', None, None, None, None, "'x'"]
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) != 1 or len(lines[0]) > ANSWER_LINE_CHARS:
        return None
    line = lines[0]
    if line.lower() in NO_VALUE:
        return None
    try:
        value = ast.literal_eval(line)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return line  # plain text, not a Python literal
    if value is None or isinstance(value, (dict, list, tuple, set)):
        return None
    return line


class CodeInterpreter(Tool):
    """Runs Python code in a limited child process and returns what it printed."""
    deterministic = True  # a fresh sandbox per call; only a wall-time kill depends on the load

    name = "code_interpreter"
    keep_last_line = True
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
        hidden_paths: list[str | Path] | None = None,
        final_answer_line: bool = False,
    ) -> None:
        """`network_namespace=False` leaves only the audit-hook network layer (for tests and for
        hosts where unshare is audited). The uid pool (`sandbox_uid_count` uids from
        `sandbox_uid_base`) matters only to a root caller: it must be numbers no account or
        other program uses; None picks DEFAULT_UID_BASE, or the top of a container's uid map.
        `workdir_parent` (default: the temp folder) must be enterable by other users.
        `hidden_paths` (default: `default_hidden_paths()`, the workspace, its state folder and git
        directory) are covered by an empty tmpfs for a root caller, so the code cannot read them.
        `final_answer_line`: a successful run that prints one value ends the task with it (`answer_line`)."""
        self.limits = limits or SandboxLimits()
        self.final_answer_line = final_answer_line
        self.network_namespace = network_namespace
        self.workdir_parent = str(Path(workdir_parent or tempfile.gettempdir()).resolve())
        if not sys.platform.startswith("linux"):
            raise ToolError(
                f"code_interpreter: needs Linux (rlimits, /proc, namespaces); this is {sys.platform}"
            )
        if not sys.executable:
            raise ToolError("code_interpreter: sys.executable is empty; cannot start a child interpreter")
        self._warned_no_netns = False
        self.files: dict[str, bytes] = {}
        """Written into every call's working folder before the code runs (see `with_files`)."""
        self.preload: str | None = None
        self.as_root = os.geteuid() == 0
        self._mounts: list[tuple[str, list[str]]] = []
        self.hidden_paths: list[str] = []
        if self.as_root:
            if sandbox_uid_base is None:
                sandbox_uid_base = default_uid_base(sandbox_uid_count)
            last = sandbox_uid_base + sandbox_uid_count - 1
            valid = any(first <= sandbox_uid_base and last < end for first, end in uid_extents())
            if sandbox_uid_count < 1 or sandbox_uid_base < 1 or not valid:
                raise ToolError(
                    f"code_interpreter: sandbox uids {sandbox_uid_base}..{last} are not valid in this "
                    "user namespace (see /proc/self/uid_map); pass a free range as sandbox_uid_base"
                )
            self._mounts = interpreter_mounts()
            self.hidden_paths = [str(Path(p).resolve()) for p in
                                 (default_hidden_paths() if hidden_paths is None else hidden_paths)]
            if blocking_folder(os.path.join(self.workdir_parent, "x")) is not None:
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
            "output shown; no network; a fresh empty working folder and /tmp; each call starts from scratch "
            "(no state is kept). numpy and the standard library are available."
        )

    # ------------------------------------------------------------------ public
    def with_files(self, files: dict[str, bytes], *, preload: str | None = None, note: str = "") -> CodeInterpreter:
        """A view of this tool whose calls find `files` (plain names) in their working folder, with
        the public names (`__all__`) of the module `preload` (one of the files, without `.py`)
        already defined for the code, and `note` added to the description. The episode
        environment gives a domain's episodes its records this way (`envs.records`)."""
        bad = [n for n in files if not n or os.path.basename(n) != n or n.startswith(".")]
        if bad:
            raise ToolError(f"code_interpreter: file names must be plain names, got {bad}")
        if preload is not None and f"{preload}.py" not in files:
            raise ToolError(f"code_interpreter: preload module {preload!r} is not among the files {sorted(files)}")
        view = copy.copy(self)
        view.files, view.preload = dict(files), preload
        view.description = f"{self.description} {note}".strip()
        return view

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
            lease = UidLease(self.sandbox_uid_base, self.sandbox_uid_count)
        workdir = tempfile.mkdtemp(prefix="toolorchestra-code-", dir=self.workdir_parent)
        try:
            if lease is not None:
                assert lease.uid is not None
                os.chown(workdir, lease.uid, lease.uid)
            for name, content in self.files.items():
                # written by the caller, readable by the sandbox uid (the folder is its own)
                path = os.path.join(workdir, name)
                with open(path, "wb") as handle:
                    handle.write(content)
                os.chmod(path, 0o644)
            os.chmod(workdir, 0o700)
            mounts = call_mounts(workdir, interpreter=self._mounts, hidden=self.hidden_paths,
                                 tmp_mb=self.limits.tmp_mb) if lease is not None else []
            result = execute(
                code,
                workdir,
                None if lease is None else lease.uid,
                self.limits,
                network_namespace=self.network_namespace,
                mounts=mounts,
                preload=self.preload,
            )
        finally:
            try:
                remove_tree(workdir)
            finally:
                if lease is not None:
                    lease.release()
        out = observe(result, self.limits, None if lease is None else lease.uid, mounts)
        isolation = out.data["isolation"]
        if isolation["network"] != "netns" and not self._warned_no_netns:
            self._warned_no_netns = True
            log.warning(
                "code_interpreter: no network namespace (%s); only the audit hook blocks sockets",
                isolation["network_error"] or "disabled",
            )
        if self.final_answer_line and out.ok and not out.data["truncated"]:
            answer = answer_line(out.data["stdout"])
            if answer is not None:
                out.data.update(final=True, answer=answer)
        return out
