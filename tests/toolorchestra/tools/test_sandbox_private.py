"""The sandbox keeps nothing and sees nothing of ours: a private size-limited /tmp and /dev/shm per
call, removed with it; no file of one call visible to a later one (same uid included); the
workspace, its state folder and git directory unreadable. Root callers only (mount namespaces)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from toolorchestra.tools.code_interpreter import CodeInterpreter, SandboxLimits
from toolorchestra.tools.sandbox.isolation import (
    SHARED_WRITABLE,
    blocking_folder,
    call_mounts,
    default_hidden_paths,
    git_dirs,
    interpreter_roots,
)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
    pytest.mark.skipif(os.geteuid() != 0, reason="private mounts need a root caller (as here and in CI)"),
]

LIMITS = SandboxLimits(wall_time_s=5, memory_mb=256, max_processes=16, tmp_mb=4)


def skip_under_shared(path: Path) -> None:
    """Skip when `path` lies in a folder every call covers with its own tmpfs (a checkout under
    /tmp): hiding it, or seeing it without hiding, cannot be told apart there."""
    for shared in SHARED_WRITABLE:
        if path.resolve().is_relative_to(Path(shared).resolve()):
            pytest.skip(f"{path} lies under {shared}, which every sandboxed call covers anyway")


@pytest.fixture
def one_uid(tmp_path) -> CodeInterpreter:
    """Every call draws the same sandbox uid: the case where a 0600 file used to leak."""
    return CodeInterpreter(LIMITS, sandbox_uid_count=1, hidden_paths=[])


def test_tmp_and_shm_files_do_not_outlive_the_call_nor_reach_the_next(one_uid):
    name = f"leak-{os.getpid()}"
    write = (f"import os\nfor d in ('/tmp', '/dev/shm', '/var/tmp'):\n"
             f"    fd = os.open(os.path.join(d, '{name}'), os.O_CREAT | os.O_WRONLY, 0o600)\n"
             f"    os.write(fd, b'secret'); os.close(fd)\nprint('wrote')")
    first = one_uid.run({"code": write})
    assert first.ok and "wrote" in first.content, first.content
    assert {"/tmp", "/dev/shm"} <= set(first.data["isolation"]["private_folders"])
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not Path(folder, name).exists()  # nothing reached the host
    read = (f"import os\nprint(json.dumps([os.path.exists(os.path.join(d, '{name}')) "
            "for d in ('/tmp', '/dev/shm', '/var/tmp')]))")
    second = one_uid.run({"code": "import json\n" + read})
    assert second.data["isolation"]["uid"] == first.data["isolation"]["uid"]
    assert json.loads(second.content.split("--- stdout ---\n")[1]) == [False, False, False]


def test_private_shm_is_size_limited(one_uid):
    code = "open('/dev/shm/big', 'wb').write(b'x' * (8 * 2**20))"  # 8 MiB into a 4 MiB tmpfs
    out = one_uid.run({"code": code})
    assert not out.ok and "No space left on device" in out.content


def test_a_host_tmp_file_of_another_user_is_not_visible(one_uid, tmp_path):
    planted = Path("/tmp") / f"planted-{os.getpid()}"
    planted.write_text("host")
    planted.chmod(0o644)
    try:
        out = one_uid.run({"code": f"import os\nprint(os.path.exists({str(planted)!r}))"})
        assert out.ok and out.content.endswith("False"), out.content
    finally:
        planted.unlink()


@pytest.fixture
def outside_tmp():
    """A world-readable folder outside /tmp (which every call covers anyway): the repository's
    git-ignored state folder."""
    base = Path(__file__).resolve().parents[3] / ".orchestra"
    skip_under_shared(base)
    base.mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="hidden-test-", dir=base))
    folder.chmod(0o755)  # mkdtemp makes it 0700
    if blocking_folder(str(folder / "x")) is not None:
        shutil.rmtree(folder)
        pytest.skip(f"{folder} is closed to other users: nothing to hide")
    yield folder
    shutil.rmtree(folder)


def test_the_workspace_and_state_are_not_readable(outside_tmp, monkeypatch):
    tmp_path = outside_tmp
    ws = tmp_path / "ws"
    (ws / ".orchestra").mkdir(parents=True)
    (ws / ".git").mkdir()
    (ws / "params.yaml").write_text("base: {}\n")
    (ws / ".orchestra" / "mlflow.db").write_text("runs")
    (ws / ".git" / "config").write_text("[core]")
    for path in (ws, tmp_path):
        path.chmod(0o755)
    for path in ws.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # world-readable: only the mount hides them
    monkeypatch.setenv("ORCHESTRA_WORKSPACE", str(ws))
    assert str(ws.resolve()) in default_hidden_paths()
    tool = CodeInterpreter(LIMITS)
    code = "import os, json\nprint(json.dumps({p: os.path.exists(p) for p in %r}))" % [
        str(ws / "params.yaml"), str(ws / ".orchestra" / "mlflow.db"), str(ws / ".git" / "config")]
    out = tool.run({"code": code})
    assert out.ok, out.content
    assert not any(json.loads(out.content.split("--- stdout ---\n")[1]).values())
    assert str(ws.resolve()) in out.data["isolation"]["private_folders"]
    # Control: without hiding, the same uid reads them (the files are world-readable).
    open_tool = CodeInterpreter(LIMITS, hidden_paths=[])
    assert all(json.loads(open_tool.run({"code": code}).content.split("--- stdout ---\n")[1]).values())


def test_a_worktrees_git_directory_is_hidden_too(tmp_path):
    main, wt = tmp_path / "main", tmp_path / "wt"
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    subprocess.run(["git", "-C", str(main), "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    subprocess.run(["git", "-C", str(main), "worktree", "add", "-q", str(wt)], check=True)
    assert git_dirs(wt) == [(main / ".git").resolve()]
    assert git_dirs(main) == []


def test_the_mount_plan_keeps_what_the_call_needs(tmp_path):
    workdir = tmp_path / "call"
    workdir.mkdir()
    plan = call_mounts(str(workdir), interpreter=[], hidden=["/", str(tmp_path / "ws")], tmp_mb=8)
    folders = [folder for folder, _, _ in plan]
    assert "/" not in folders and folders.index("/tmp") == 0
    tmp = dict((f, (o, k)) for f, o, k in plan)["/tmp"]
    # bound back: the call's folder, and the interpreter's when it lies under /tmp (a checkout there)
    under_tmp = [r for r in interpreter_roots() if Path(r).is_relative_to(os.path.realpath("/tmp"))]
    assert tmp == ("mode=1777,size=8m", sorted([os.path.realpath(workdir), *under_tmp]))


def test_a_hidden_folder_holding_the_interpreter_keeps_the_interpreter():
    """A venv inside the workspace (as `make install` makes it) still runs, numpy included."""
    prefix = Path(sys.prefix).resolve()
    tool = CodeInterpreter(LIMITS, hidden_paths=[prefix.parent])
    out = tool.run({"code": f"import os, numpy\nprint(sorted(os.listdir({str(prefix.parent)!r})))"})
    assert out.ok, out.content
    seen = set(ast.literal_eval(out.content.split("--- stdout ---\n")[1]))
    kept = {Path(p).relative_to(prefix.parent).parts[0] for p in interpreter_roots() if prefix.parent in Path(p).parents}
    assert prefix.name in seen and seen <= kept, (seen, kept)
