"""Turns a finished `SandboxRun` into the tool's observation: what the model reads, plus `data`.

The content is a status line (exit status, signal or wall-time stop), notes naming the limit that
was hit (memory, processes, CPU time) and the leftovers killed, then stdout and stderr sharing the
`max_output_bytes` budget, each keeping its head and tail. `data` carries the same facts as fields
and says which isolation layers were active. A child whose setup failed is an error, not an
observation.
"""

from __future__ import annotations

import signal

from toolorchestra.tools.base import ToolError, ToolOutput
from toolorchestra.tools.sandbox.limits import SandboxLimits
from toolorchestra.tools.sandbox.runner import SandboxRun


def observe(
    run: SandboxRun, limits: SandboxLimits, uid: int | None, mounts: list[tuple[str, list[str]]]
) -> ToolOutput:
    """The observation of `run`; raises ToolError when the sandbox could not be set up."""
    lim = limits
    if run.setup.get("event") != "ready" and not run.timed_out:
        reason = run.setup.get("error") or f"the child exited with status {run.returncode} early"
        if "CLONE_NEWNS" in reason:
            closed = ", ".join(top for top, *_ in mounts)
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
        # Folders the call saw as its own empty tmpfs: private /tmp and /dev/shm, hidden workspace.
        "private_folders": run.setup.get("covered", []),
    }
    return ToolOutput(
        content="\n".join(lines),
        ok=not run.timed_out and run.returncode == 0,
        data={
            "exit_code": run.returncode if run.returncode >= 0 else None,
            "signal": signal_name,
            "timed_out": run.timed_out,
            "memory_exceeded": memory,
            "process_limit_hit": process_limit,
            "stdout": out,  # as shown (cut to the output budget); what a program expert answers with
            "stdout_bytes": run.stdout.total,
            "stderr_bytes": run.stderr.total,
            "truncated": out_cut or err_cut,
            "duration_s": round(run.duration_s, 4),
            "survivors_killed": run.survivors_killed,
            "sandbox_id": run.call_id,
            "isolation": isolation,
        },
    )
