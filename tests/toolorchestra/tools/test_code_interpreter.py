"""Tests of the sandboxed code interpreter: normal code, limits, containment and isolation.

The hostile cases (infinite loop, memory bomb, fork bombs, escapees, network) run real code in
real child processes; each uses short limits so the file stays well under a minute.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from toolorchestra.tools.base import ToolError, ToolOutput
from toolorchestra.tools.code_interpreter import CodeInterpreter, SandboxLimits, answer_line
from toolorchestra.tools.sandbox import processes
from toolorchestra.tools.sandbox.processes import MARKER_ENV, kill_all

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

SHORT = SandboxLimits(wall_time_s=2, memory_mb=256, max_processes=16)


@pytest.fixture(scope="module")
def ci() -> CodeInterpreter:
    return CodeInterpreter(SHORT)


def _survivors(out: ToolOutput) -> list[int]:
    """Live processes of this call: its dedicated uid (as root), or its marker in argv / environ."""
    sid = out.data["sandbox_id"].encode()
    uid = out.data["isolation"]["uid"] if os.geteuid() == 0 else None
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue  # dead, only waiting for init to reap it
            if uid is not None and os.stat(f"/proc/{name}").st_uid == uid:
                found.append(int(name))
                continue
            blobs = [Path(f"/proc/{name}/cmdline").read_bytes(), Path(f"/proc/{name}/environ").read_bytes()]
        except OSError:
            continue
        if any(sid in blob for blob in blobs):
            found.append(int(name))
    return found


# ------------------------------------------------------------------ interface and arguments
def test_spec_is_a_valid_function_schema(ci: CodeInterpreter) -> None:
    spec = ci.spec()
    assert spec["function"]["name"] == "code_interpreter"
    jsonschema.Draft202012Validator.check_schema(ci.parameters)
    jsonschema.validate({"code": "print(1)"}, ci.parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, ci.parameters)
    assert "2 s" in spec["function"]["description"] and "256 MB" in spec["function"]["description"]


def test_limits_are_validated_and_frozen() -> None:
    limits = SandboxLimits()
    assert (limits.wall_time_s, limits.memory_mb, limits.max_output_bytes) == (10, 512, 8000)
    assert limits.cpu_seconds == 11  # the wall time stops a busy loop first
    assert SandboxLimits(wall_time_s=2.5, cpu_time_s=1.2).cpu_seconds == 1
    with pytest.raises(ValidationError):
        limits.memory_mb = 1  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        SandboxLimits(wall_time=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="lower cpu_time_s"):
        SandboxLimits(wall_time_s=1, cpu_time_s=60)
    with pytest.raises(ValidationError):
        SandboxLimits(wall_time_s=0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({}, "must be a string"), ({"code": 3}, "must be a string"), ({"code": "  \n"}, "is empty")],
)
def test_bad_arguments_raise_tool_error(ci: CodeInterpreter, arguments: dict, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        ci.run(arguments)


# ------------------------------------------------------------------ normal code
def test_prints_and_reports_exit_status(ci: CodeInterpreter) -> None:
    out = ci.run({"code": "import sys\nprint('hello', 6 * 7)\nprint('careful', file=sys.stderr)"})
    assert out.ok, out.content
    assert out.content.splitlines()[0] == "exit status: 0"
    assert "hello 42" in out.content and "--- stderr ---\ncareful" in out.content
    assert out.data["exit_code"] == 0 and not out.data["timed_out"]


def test_files_are_in_the_working_folder_and_the_preload_names_are_defined(ci: CodeInterpreter) -> None:
    files = {"helper.py": b"__all__ = ['twice']\n\ndef twice(x):\n    return 2 * x\n\nHIDDEN = 1\n",
             "table.txt": b"7\n"}
    view = ci.with_files(files, preload="helper", note="A helper is loaded.")
    assert view.description.endswith("A helper is loaded.") and not ci.files and "helper" not in ci.description
    out = view.run({"code": "print(twice(int(open('table.txt').read())), 'HIDDEN' in globals())"})
    assert out.ok and out.content.splitlines()[-1] == "14 False", out.content
    assert "twice" not in ci.run({"code": "print(sorted(globals()))"}).content  # the tool itself is unchanged
    with pytest.raises(ToolError, match="plain names"):
        ci.with_files({"../escape.py": b""})
    with pytest.raises(ToolError, match="preload module 'absent' is not among the files"):
        ci.with_files(files, preload="absent")


def test_exception_shows_its_traceback_without_sandbox_frames(ci: CodeInterpreter) -> None:
    out = ci.run({"code": "x = 1\n\ndef f():\n    return x / 0\n\nf()\n"})
    assert not out.ok and out.data["exit_code"] == 1
    assert 'File "<code>", line 4, in f' in out.content
    assert "return x / 0" in out.content  # the source line is shown
    assert "ZeroDivisionError: division by zero" in out.content
    assert "<sandbox>" not in out.content


def test_syntax_error_and_sys_exit(ci: CodeInterpreter) -> None:
    out = ci.run({"code": "def f(:\n    pass"})
    assert not out.ok and "SyntaxError" in out.content
    out = ci.run({"code": "import sys\nprint('bye')\nsys.exit(3)"})
    assert not out.ok and out.data["exit_code"] == 3 and "bye" in out.content


@pytest.mark.parametrize(
    ("stdout", "answer"),
    [("391\n", "391"), ("  36.0  \n\n", "36.0"), ("Zapiekanka Krakowska", "Zapiekanka Krakowska"),
     ("True", "True"), ("step 1\n391", None), ("None", None), ("nan", None), ("", None),
     ("{'id': 'A1', 'status': 'lost'}", None), ("[3, 4]", None), ("()", None), ("x" * 201, None)],
)
def test_answer_line_is_one_printed_value_and_nothing_to_read_on(stdout: str, answer: str | None) -> None:
    assert answer_line(stdout) == answer


def test_final_answer_line_ends_the_task_only_for_a_successful_one_value_run() -> None:
    final = CodeInterpreter(SHORT, final_answer_line=True)
    out = final.run({"code": "print(17 * 23)"})
    assert out.ok and out.data["final"] and out.data["answer"] == "391"
    assert "391" in out.content  # the observation is the same as without the option
    for code in ("print({'id': 'A1'})", "print(1)\nprint(2)", "print(7)\nraise SystemExit(1)", "x = 1"):
        assert not final.run({"code": code}).data.get("final"), code
    assert final.with_files({"a.txt": b""}).final_answer_line  # a domain's view keeps the option
    assert "final" not in CodeInterpreter(SHORT).run({"code": "print(17 * 23)"}).data  # off by default


def test_numpy_imports_and_works() -> None:
    code = "import numpy as np\nprint(int(np.arange(10).sum()), np.__version__)"
    out = CodeInterpreter().run({"code": code})
    assert out.ok, out.content
    assert "45 " in out.content


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_imports_under_the_default_limits() -> None:
    """RLIMIT_AS alone would break this (torch maps ~0.8 GiB); RLIMIT_DATA leaves it working."""
    out = CodeInterpreter().run({"code": "import torch\nprint(float(torch.ones(3).sum()))"})
    assert out.ok, out.content
    assert "3.0" in out.content


def test_long_output_is_truncated_keeping_head_and_tail() -> None:
    interpreter = CodeInterpreter(SHORT.model_copy(update={"max_output_bytes": 1000}))
    out = interpreter.run({"code": "print('START')\nprint('x' * 200000)\nraise ValueError('the end')"})
    assert out.data["truncated"] and not out.ok
    assert "START" in out.content and "ValueError: the end" in out.content  # head and tail kept
    assert "bytes cut" in out.content and "output was truncated to 1000 bytes" in out.content
    assert len(out.content.encode()) < 1000 + 400
    assert out.data["stdout_bytes"] > 200000


def test_working_folder_is_empty_private_and_removed(ci: CodeInterpreter) -> None:
    code = (
        "import os\n"
        "print(os.getcwd())\n"
        "print(os.listdir('.'))\n"
        "print(os.environ['HOME'] == os.getcwd())\n"
        "import getpass\n"
        "print(getpass.getuser())\n"
        "open('left_behind.txt', 'w').write('data')\n"
        "os.makedirs('sub/deeper')\n"
        "os.chmod('sub', 0)\n"  # even an unreadable folder must not block the cleanup
    )
    out = ci.run({"code": code})
    assert out.ok, out.content
    workdir, listing, home_is_cwd, user = out.content.split("--- stdout ---\n")[1].splitlines()[:4]
    assert listing == "[]" and home_is_cwd == "True" and user == "sandbox"
    assert not Path(workdir).exists()


def test_callers_environment_secrets_are_not_visible(
    ci: CodeInterpreter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-1234")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-5678")
    out = ci.run({"code": "import os\nprint(sorted(os.environ))\nprint(dict(os.environ))"})
    assert out.ok, out.content
    assert "sk-test-secret-1234" not in out.content and "aws-secret-5678" not in out.content
    assert "OPENAI_API_KEY" not in out.content


# ------------------------------------------------------------------ limits
def test_infinite_loop_is_stopped_within_the_wall_time(ci: CodeInterpreter) -> None:
    started = time.monotonic()
    out = ci.run({"code": "print('before', flush=True)\nwhile True:\n    pass"})
    elapsed = time.monotonic() - started
    assert out.data["timed_out"] and not out.ok
    assert elapsed < SHORT.wall_time_s + 3
    assert "wall-time limit of 2 s" in out.content
    assert "before" in out.content  # what it printed before being stopped is kept
    assert _survivors(out) == []


def test_cpu_time_limit_kills_a_busy_process() -> None:
    interpreter = CodeInterpreter(SandboxLimits(wall_time_s=20, cpu_time_s=1, max_processes=16))
    started = time.monotonic()
    out = interpreter.run({"code": "while True:\n    pass"})
    assert time.monotonic() - started < 10
    assert not out.data["timed_out"] and out.data["signal"] in ("SIGXCPU", "SIGKILL")
    assert "CPU-time limit is 1 s" in out.content


def test_memory_under_the_limit_is_usable(ci: CodeInterpreter) -> None:
    out = ci.run({"code": "block = bytearray(150 * 1024 ** 2)\nprint(len(block) // 1024 ** 2)"})
    assert out.ok, out.content
    assert "150" in out.content


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(4 * 1024 ** 3)\nprint('allocated')",
        # Shared anonymous memory escapes RLIMIT_DATA; the address-space backstop catches it.
        "import mmap\nm = mmap.mmap(-1, 4 * 1024 ** 3)\nprint('allocated')",
        "hoard = []\nwhile True:\n    hoard.append(b'x' * 10 ** 6)",
    ],
    ids=["one-allocation", "shared-mmap", "gradual"],
)
def test_memory_bomb_is_stopped_and_reported(ci: CodeInterpreter, code: str) -> None:
    out = ci.run({"code": code})
    assert not out.ok and not out.data["timed_out"]
    assert out.data["memory_exceeded"]
    assert "memory limit of 256 MB was exceeded" in out.content, out.content
    assert "allocated" not in out.content.split("note:")[0]


FORK_BOMBS = {
    "os.fork": "import os\nwhile True:\n    os.fork()",
    "setsid-escape": (
        "import os\n"
        "while True:\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()\n"  # leaves the process group: only the uid-wide kill finds it
        "    except OSError:\n"
        "        pass"
    ),
    "subprocess": (
        "import subprocess, sys\n"
        "open('bomb.py', 'w').write(\n"
        "    'import subprocess, sys\\n'\n"
        "    'while True:\\n'\n"
        "    '    subprocess.Popen([sys.executable, __file__], start_new_session=True)\\n'\n"
        ")\n"
        "subprocess.Popen([sys.executable, 'bomb.py'], start_new_session=True)\n"
        "import time\n"
        "time.sleep(60)"
    ),
}


@pytest.mark.parametrize("code", list(FORK_BOMBS.values()), ids=list(FORK_BOMBS))
def test_fork_bomb_is_contained_and_nothing_survives(ci: CodeInterpreter, code: str) -> None:
    started = time.monotonic()
    out = ci.run({"code": code})
    elapsed = time.monotonic() - started
    assert not out.ok
    assert elapsed < SHORT.wall_time_s + 5
    assert _survivors(out) == [], out.data


def test_fork_bomb_hits_the_process_limit(ci: CodeInterpreter) -> None:
    out = ci.run({"code": FORK_BOMBS["os.fork"]})
    assert out.data["process_limit_hit"], out.content
    assert "process limit (16 processes and threads) was reached" in out.content


def test_background_process_is_killed_when_the_code_ends() -> None:
    interpreter = CodeInterpreter(SandboxLimits(wall_time_s=20, max_processes=16))
    code = (
        "import subprocess\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "print('done')"
    )
    started = time.monotonic()
    out = interpreter.run({"code": code})
    if out.data["isolation"]["network"] != "netns":
        pytest.skip("starting programs is blocked where no network namespace is available")
    assert out.ok, out.content
    assert time.monotonic() - started < 5  # it did not wait for the sleepers
    assert out.data["survivors_killed"] >= 2
    assert "leftover process(es) were killed" in out.content
    assert _survivors(out) == []


def test_marker_scan_kills_escapees_of_a_non_root_call() -> None:
    """The non-root path: no dedicated uid, so escapees are found by the marker in their environment."""
    call_id = "test" + os.urandom(6).hex()
    spawner = (
        "import subprocess\n"
        "p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print(p.pid, flush=True)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", spawner],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), MARKER_ENV: call_id},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    sleeper = int(proc.stdout.readline())
    try:
        assert kill_all(proc, None, call_id) >= 1
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{sleeper}").exists() and time.monotonic() < deadline:
            state = Path(f"/proc/{sleeper}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":
                break
            time.sleep(0.01)
        else:
            assert not Path(f"/proc/{sleeper}").exists()
    finally:
        proc.stdout.close()


# ------------------------------------------------------------------ network
@pytest.fixture
def loopback_server():
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server.getsockname()[1], server
    server.close()


def _assert_no_connection(server: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        server.accept()


def test_no_network_even_to_a_loopback_server(ci: CodeInterpreter, loopback_server) -> None:
    port, server = loopback_server
    code = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('blocked:', type(exc).__name__, exc)\n"
    )
    out = ci.run({"code": code})
    assert "blocked:" in out.content and "CONNECTED" not in out.content
    assert out.data["isolation"]["network"] in ("netns", "audit-hook")
    _assert_no_connection(server)


def test_audit_hook_alone_blocks_sockets_and_programs(loopback_server) -> None:
    port, server = loopback_server
    interpreter = CodeInterpreter(SHORT, network_namespace=False)
    code = (
        "import socket, subprocess\n"
        "for action in (\n"
        f"    lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2),\n"
        "    lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9)),\n"
        "    lambda: socket.socket().bind(('127.0.0.1', 0)),\n"
        "    lambda: subprocess.run(['true']),\n"
        "):\n"
        "    try:\n"
        "        action()\n"
        "        print('ALLOWED')\n"
        "    except PermissionError as exc:\n"
        "        print('refused:', exc)\n"
    )
    out = interpreter.run({"code": code})
    assert out.ok, out.content
    assert out.data["isolation"]["network"] == "audit-hook"
    assert "ALLOWED" not in out.content
    assert out.content.count("refused: network access is disabled") == 3
    assert "refused: starting programs is disabled" in out.content
    _assert_no_connection(server)


def test_network_namespace_stops_even_raw_libc_connect(ci: CodeInterpreter, loopback_server) -> None:
    """ctypes goes around the audit hook; the empty network namespace still leaves nowhere to go."""
    port, server = loopback_server
    code = (
        "import ctypes, socket, struct\n"
        "print(socket.if_nameindex())\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)\n"
        # struct sockaddr_in: family in host order, port in network order, address, padding
        f"addr = struct.pack('=H', socket.AF_INET) + struct.pack('!H', {port})\n"
        "addr += socket.inet_aton('127.0.0.1') + bytes(8)\n"
        "rc = libc.connect(fd, addr, len(addr))\n"
        "print('rc', rc, 'errno', ctypes.get_errno())\n"
    )
    out = ci.run({"code": code})
    if out.data["isolation"]["network"] != "netns":
        pytest.skip(f"network namespaces are not permitted here: {out.data['isolation']['network_error']}")
    assert out.ok, out.content
    assert "[(1, 'lo')]" in out.content
    assert "rc -1 errno" in out.content
    _assert_no_connection(server)


# ------------------------------------------------------------------ concurrency, setup, overhead
def test_concurrent_calls_are_isolated_from_each_other(ci: CodeInterpreter) -> None:
    code = "import os, time\nopen('mine', 'w').write('x')\ntime.sleep(0.3)\nprint(os.listdir('.'))"
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(ci.run, [{"code": code}] * 3))
    assert all(o.ok and "['mine']" in o.content for o in outs), [o.content for o in outs]
    if os.geteuid() == 0:
        assert len({o.data["isolation"]["uid"] for o in outs}) == 3  # one dedicated uid per call


def test_default_uid_pool_fits_the_user_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "uid_extents", lambda: [(0, 2**32 - 1)])
    assert processes.default_uid_base(64) == processes.DEFAULT_UID_BASE
    # A rootless container maps 65536 uids: stay below nobody (65534) and the 16-bit -1.
    monkeypatch.setattr(processes, "uid_extents", lambda: [(0, 65536)])
    assert processes.default_uid_base(64) == 65534 - 64


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root caller hands the folder to another uid")
def test_unreachable_workdir_parent_is_refused(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    (closed / "inner").mkdir()
    with pytest.raises(ToolError, match="cannot reach"):
        CodeInterpreter(SHORT, workdir_parent=closed / "inner")


def test_isolation_is_reported(ci: CodeInterpreter) -> None:
    out = ci.run({"code": "print(1)"})
    isolation = out.data["isolation"]
    assert isolation["network"] in ("netns", "audit-hook")
    if os.geteuid() == 0:
        assert isolation["uid"] >= 2_000_000_000
        assert "dedicated uid" in isolation["processes"]


def test_trivial_call_overhead(ci: CodeInterpreter) -> None:
    """Process start overhead of one call; the figure is printed (pytest -s) for the report."""
    ci.run({"code": "pass"})  # warm the page cache
    times = []
    for _ in range(5):
        started = time.perf_counter()
        assert ci.run({"code": "print(1)"}).ok
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    print(f"\ncode_interpreter trivial call: median {median * 1000:.0f} ms, min {min(times) * 1000:.0f} ms")
    assert median < 1.5  # generous: the CI machines are shared
