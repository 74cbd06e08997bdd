"""The sandbox behind the `code_interpreter` tool: run Python in a separate, limited, throw-away process.

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
* **Files.** The uid owns only its working folder. A root caller's child makes a private mount
  namespace (unshare(CLONE_NEWNS), propagation private) before dropping to the uid, and in it:
  - lays its own empty, size-limited tmpfs (`tmp_mb`, mode 1777) over each folder every uid
    shares for writing (/tmp, /var/tmp, /dev/shm, /run/lock), with only the call's working folder
    bound back: nothing the code writes there reaches the host or a later call (the same uid
    included), and the memory is freed when the call's last process dies with the namespace;
  - lays an empty read-only-for-the-uid tmpfs over each hidden folder (`hidden_paths`, default
    the workspace, its state folder `.orchestra/` and its git directory, so also `.git`, the DVC
    cache, MLflow and Prefect databases), binding back only the interpreter's prefixes when they
    lie inside (a venv in the workspace);
  - when the interpreter lives where other users cannot read it (pyenv under a 0700 /root, as on
    this project's machines), lays a small tmpfs over the blocking folder and binds only the
    interpreter's prefixes back.
  Which folders were covered is reported in `data["isolation"]["private_folders"]`. A non-root
  caller gets none of this (no mount namespace without a user namespace): its files in /tmp and
  /dev/shm are limited in size (RLIMIT_FSIZE) but shared and not removed.

Departure from the paper: ToolOrchestra runs its code interpreter as a remote sandbox service;
here it is a local process with kernel limits, good for the embedded profile and CI.

The modules, one job each (`toolorchestra.tools.code_interpreter.CodeInterpreter` ties them into
the tool; nothing here is public API):

* `limits`: `SandboxLimits`, the validated limits of one call.
* `child`: the bootstrap that runs inside the child (sent on stdin, never imported): the mount
  and network namespaces, rlimits, the uid drop, the audit hook, then the code.
* `reaper`: the script that kills every process of a sandbox uid, run as that uid.
* `processes`: the uid pool, /proc scans, and killing the process group and its escapees.
* `isolation`: the caller's side of isolation: the child's minimal environment and mount plan.
* `runner`: starting one child, moving data on its pipes, collecting its output and setup report.
* `observation`: turning a finished run into the tool's `ToolOutput`.
"""
