"""Kills every process of one sandbox uid: `python -I -S -c <this file's text> UID`, started as root.

It drops to the sandbox uid itself (the uid may be unable to read the interpreter outside the
child's mount namespace), so `kill(-1)` then reaches exactly that uid's processes, atomically,
including those that left the call's process group. `processes.kill_all` runs it; importing it
does nothing.
"""

import os
import sys


def _main() -> None:
    uid = int(sys.argv[1])
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # from here on, kill(-1) reaches exactly this uid's processes
    for _ in range(1000):
        try:
            os.kill(-1, 9)  # atomic over all of them, so a fork bomb cannot outrun it
        except ProcessLookupError:
            break


if __name__ == "__main__":
    _main()
