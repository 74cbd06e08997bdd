"""The caller's side of the isolation layers: the child's environment and its mount plan.

The layers themselves (mount namespace, network namespace, audit hook, rlimits, uid) are set up
inside the child by `child.py`; this module decides what it is given: a minimal environment that
carries none of the caller's secrets (`child_env`), and, for a root caller whose interpreter lies
under a folder other users cannot enter, which folders to bind back over a tmpfs
(`interpreter_mounts`). See the package docstring for the whole design.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from pathlib import Path

from toolorchestra.tools.base import ToolError
from toolorchestra.tools.sandbox.processes import MARKER_ENV


def child_env(workdir: str, call_id: str) -> dict[str, str]:
    """The child's whole environment."""
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


def blocking_folder(path: str) -> str | None:
    """The top-most folder on `path` that other users cannot enter, if any."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = str(Path(*parts[:i]))
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder
    return None


def interpreter_mounts() -> list[tuple[str, list[str]]]:
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
        top = blocking_folder(p)
        if top is None:
            continue
        if os.stat(p).st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
            raise ToolError(
                f"code_interpreter: the interpreter folder {p} is closed to other users; run `chmod o+rx {p}`"
            )
        mounts.setdefault(top, []).append(p)
    return sorted(mounts.items())
