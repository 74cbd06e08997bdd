"""The bootstrap of a sandboxed call: runs in the child interpreter, never imported by the caller.

`runner.py` reads this file's text (importlib.resources) and sends it on the child's stdin ahead of
the code (see `runner.LAUNCH`), so the child needs no access to this package's folder: a sandbox
uid may be unable to read it. It runs as the caller's user at first, sets up the isolation layers
(mount namespace, network namespace, rlimits, the dedicated uid; see the package docstring),
reports its setup as one JSON line on the status pipe, installs the audit hook and then runs the
code as `__main__`. Only the standard library is used here: the child runs with `-I`.
"""

import json
import os
import sys


def _setup(cfg, status_fd):
    import ctypes
    import resource
    import signal
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
    MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18

    def fail(what):
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(src, target, fstype, flags, data):
        def enc(s):
            return None if s is None else os.fsencode(s)
        if libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) != 0:
            fail(f"mount {target}")

    info = {"network": "audit-hook", "uid": None, "mount_namespace": False}
    if cfg["mounts"]:
        # Root only: private /tmp and /dev/shm, hidden workspace, readable interpreter (see the
        # package docstring). The namespace and its tmpfs mounts vanish with the call's last process.
        if libc.unshare(CLONE_NEWNS) != 0:
            fail("unshare(CLONE_NEWNS)")
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing below leaks to the host
        covered = []
        for top, options, paths in cfg["mounts"]:
            if not os.path.isdir(top):
                continue  # an outer tmpfs already hid it
            fds = [(p, os.open(p, os.O_PATH | os.O_DIRECTORY)) for p in paths if os.path.isdir(p)]  # before covering
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, options)
            for p, fd in fds:
                os.makedirs(p, mode=0o755, exist_ok=True)
                mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC, None)
                os.close(fd)
            covered.append(top)
        info["mount_namespace"] = True
        info["covered"] = covered
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

    import builtins
    import linecache
    import traceback
    import types
    linecache.cache["<code>"] = (len(code), None, code.splitlines(True), "<code>")
    sys.argv = ["<code>"]
    sys.path.insert(0, cfg["workdir"])
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main  # so pickling (multiprocessing) finds the code's names
    try:
        if cfg.get("preload"):  # inside the try: its errors are the code's to read
            import importlib
            module = importlib.import_module(cfg["preload"])
            main.__dict__.update({name: getattr(module, name) for name in getattr(module, "__all__", ())})
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


if __name__ == "__main__":  # the launcher execs this as __main__; importing it does nothing
    _main()
