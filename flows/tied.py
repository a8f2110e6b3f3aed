"""Child processes that die with the process that started them, even when it is killed with SIGKILL.

Linux's PR_SET_PDEATHSIG, set by a tiny launcher in the child before it execs the real command (no
preexec_fn: forking a threaded process and running Python before exec can deadlock). The signal
follows the THREAD that started the child: start them from a thread that lives as long as the run
(the CLI's main thread). Each child gets its own session, so a terminal's Ctrl-C reaches only the
parent, which then stops its children in order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any, Sequence

PR_SET_PDEATHSIG = 1
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(%d, %d)\n"
    "if os.getppid() != int(sys.argv[1]):\n"  # the parent died before prctl took effect
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
) % (PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn_tied(cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Popen(cmd) in its own session, killed (SIGKILL) when this process's calling thread dies."""
    if not sys.platform.startswith("linux"):
        return subprocess.Popen(list(cmd), start_new_session=True, **popen)
    return subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(os.getpid()), *cmd], start_new_session=True,
                            **popen)


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the child's whole session (its own children too), SIGKILL after `grace` seconds."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
