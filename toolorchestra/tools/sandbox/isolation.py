"""The caller's side of the isolation layers: the child's environment and its mount plan.

The layers themselves (mount namespace, network namespace, audit hook, rlimits, uid) are set up
inside the child by `child.py`; this module decides what it is given: a minimal environment that
carries none of the caller's secrets (`child_env`), and, for a root caller, the mount plan of the
call (`call_mounts`): a private size-limited tmpfs over each shared writable folder (/tmp,
/var/tmp, /dev/shm, /run/lock), an empty tmpfs over each hidden folder (the workspace, its state
folder, the git directory: `default_hidden_paths`), and a tmpfs over a folder other users cannot
enter that holds the interpreter (`interpreter_mounts`), each with the folders the call needs (its
working folder, the interpreter) bound back. See the package docstring for the whole design.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from pathlib import Path

from toolorchestra.core.settings import load_settings
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


def interpreter_roots() -> list[str]:
    """The outermost folders of this interpreter (prefixes, stdlib, site-packages)."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths |= {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths = {os.path.realpath(p) for p in paths if os.path.isdir(p)}
    # Nested paths are covered by their ancestor's bind mount.
    return sorted(p for p in paths if not any(p != q and p.startswith(q + os.sep) for q in paths))


def interpreter_mounts() -> list[tuple[str, list[str]]]:
    """Folders to bind back over tmpfs so an unprivileged uid can run this interpreter.

    Raises ToolError when a needed folder itself is closed to other users (nothing to bind).
    """
    mounts: dict[str, list[str]] = {}
    for p in interpreter_roots():
        top = blocking_folder(p)
        if top is None:
            continue
        if os.stat(p).st_mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH:
            raise ToolError(
                f"code_interpreter: the interpreter folder {p} is closed to other users; run `chmod o+rx {p}`"
            )
        mounts.setdefault(top, []).append(p)
    return sorted(mounts.items())


SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
"""World-writable folders every uid shares: each call gets its own empty tmpfs over them."""

Mount = tuple[str, str, list[str]]
"""(folder to cover with a tmpfs, tmpfs options, folders under it to bind back)."""


def git_dirs(workspace: Path) -> list[Path]:
    """The workspace's git directory when it lives elsewhere (a worktree's `.git` is a file naming it)."""
    dot_git = workspace / ".git"
    if not dot_git.is_file():
        return []
    try:
        gitdir = Path(dot_git.read_text(encoding="utf-8").split("gitdir:", 1)[1].strip())
        gitdir = (workspace / gitdir).resolve()
        common = gitdir / "commondir"
        return [(gitdir / common.read_text(encoding="utf-8").strip()).resolve() if common.is_file() else gitdir]
    except (OSError, IndexError):
        return []


def default_hidden_paths() -> list[str]:
    """What sandboxed code must not read: the workspace (its `.git`, `.dvc` cache, data), the state
    folder (`.orchestra/`: MLflow and Prefect databases, model caches) and the git directory."""
    settings = load_settings()
    paths = [settings.workspace, settings.state, *git_dirs(settings.workspace)]
    return sorted({str(p.resolve()) for p in paths})


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def call_mounts(workdir: str, *, interpreter: list[tuple[str, list[str]]], hidden: list[str],
                tmp_mb: int) -> list[Mount]:
    """The mount plan of one call, outermost folders first (the child skips a folder an outer
    tmpfs already hid)."""
    keep = [os.path.realpath(workdir), *interpreter_roots()]
    plan: dict[str, tuple[str, set[str]]] = {}

    def cover(folder: str, options: str) -> None:
        folder = os.path.realpath(folder)
        if folder == "/" or not os.path.isdir(folder):
            return  # hiding / would hide the interpreter's whole world; nothing to cover
        kept = {k for k in keep if _under(k, folder) and k != folder}
        if any(k == folder for k in keep):
            return  # the call needs this very folder
        old = plan.get(folder)
        plan[folder] = (old[0] if old else options, (old[1] if old else set()) | kept)

    for top, _ in interpreter:
        cover(top, "mode=0755,size=1m")
    for folder in SHARED_WRITABLE:
        cover(folder, f"mode=1777,size={tmp_mb}m")
    for folder in hidden:
        cover(folder, "mode=0755,size=16k")
    ordered = sorted(plan.items(), key=lambda item: (item[0].count(os.sep), item[0]))
    return [(folder, options, sorted(kept)) for folder, (options, kept) in ordered]
