"""Child processes that die with the process that started them, even when it is killed with SIGKILL,
and take everything they started with them.

Each child runs under a small supervisor in a session of its own: Linux's PR_SET_PDEATHSIG tells the
supervisor when the parent dies; it then asks the command to end (SIGTERM: a server flushes what it
holds) and kills the whole session a grace period later (the command, and whatever it started: Dask
workers, their compiler processes, even one hung in an op). When the command ends, what it left in
its session is killed at once. SIGTERM to the supervisor is passed on to the command. No preexec_fn: forking a threaded process and running Python before
exec can deadlock. The death signal follows the THREAD that started the child: start them from a
thread that lives as long as the run (the CLI's main thread). A terminal's Ctrl-C reaches only the
parent (other session), which then stops its children in order.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Sequence

PR_SET_PDEATHSIG = 1
_SUPERVISOR = """
import ctypes, os, signal, sys
parent, grace, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
child = None
def kill_session(*_):
    os.killpg(0, signal.SIGKILL)
def forward(signum, frame):
    if child:
        os.kill(child, signal.SIGTERM)
def parent_died(signum, frame):
    forward(signum, frame)
    signal.alarm(grace)  # then whatever is left goes
signal.signal(signal.SIGALRM, kill_session)
signal.signal(signal.SIGUSR1, parent_died)
signal.signal(signal.SIGTERM, forward)
ctypes.CDLL(None, use_errno=True).prctl(%d, signal.SIGUSR1)
if os.getppid() != parent:  # the parent died before prctl took effect
    kill_session()
child = os.fork()
if child == 0:
    for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM):
        signal.signal(sig, signal.SIG_DFL)
    os.execvp(cmd[0], cmd)
while True:
    try:
        status = os.waitpid(child, 0)[1]
        break
    except InterruptedError:
        continue
child = None
for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGALRM):
    signal.signal(sig, signal.SIG_IGN)
code = os.waitstatus_to_exitcode(status)
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:  # what the command left in the session
    try:
        if pid != os.getpid() and os.getsid(pid) == os.getsid(0):
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
os._exit(code if code >= 0 else 128 - code)
""" % PR_SET_PDEATHSIG


def spawn_tied(cmd: Sequence[str], grace: int = 10, **popen: Any) -> subprocess.Popen:
    """Popen(cmd) in a session of its own. When this process's calling thread dies, the command gets
    SIGTERM, and `grace` seconds later its session is killed; when the command ends, so does
    whatever it left. Popen.terminate() asks the command to end (SIGTERM) without waiting."""
    if not sys.platform.startswith("linux"):
        return subprocess.Popen(list(cmd), start_new_session=True, **popen)
    return subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(os.getpid()), str(grace), *cmd],
                            start_new_session=True, **popen)
