"""Child processes that die with the process that started them, even when it is killed with SIGKILL,
and take everything they started with them.

Each child runs under a small supervisor in a session of its own: Linux's PR_SET_PDEATHSIG tells the
supervisor when the parent dies, and it then kills the whole session (the command, and whatever the
command started: Dask workers, their compiler processes, even one hung in an op). When the command
ends by itself, what it left in its session is killed too. SIGTERM is passed on to the command (a
server flushes what it holds). No preexec_fn: forking a threaded process and running Python before
exec can deadlock. The death signal follows the THREAD that started the child: start them from a
thread that lives as long as the run (the CLI's main thread). A terminal's Ctrl-C reaches only the
parent (other session), which then stops its children in order.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Sequence

PR_SET_PDEATHSIG = 1
_SUPERVISOR = """
import ctypes, os, signal, sys
parent, cmd = int(sys.argv[1]), sys.argv[2:]
def kill_session(*_):
    os.killpg(0, signal.SIGKILL)
child = None
def forward(signum, frame):
    if child:
        os.kill(child, signum)
signal.signal(signal.SIGUSR1, kill_session)
signal.signal(signal.SIGTERM, forward)
ctypes.CDLL(None, use_errno=True).prctl(%d, signal.SIGUSR1)
if os.getppid() != parent:  # the parent died before prctl took effect
    kill_session()
child = os.fork()
if child == 0:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    os.execvp(cmd[0], cmd)
while True:
    try:
        status = os.waitpid(child, 0)[1]
        break
    except InterruptedError:
        continue
child = None
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = os.waitstatus_to_exitcode(status)
sys.stdout.flush()
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
    try:
        if pid != os.getpid() and os.getsid(pid) == os.getsid(0):
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
os._exit(code if code >= 0 else 128 - code)
""" % PR_SET_PDEATHSIG


def spawn_tied(cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
    """Popen(cmd) in its own session, killed (SIGKILL) when this process's calling thread dies."""
    if not sys.platform.startswith("linux"):
        return subprocess.Popen(list(cmd), start_new_session=True, **popen)
    return subprocess.Popen([sys.executable, "-c", _SUPERVISOR, str(os.getpid()), *cmd], start_new_session=True,
                            **popen)


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the child's whole session (its own children too, even once the child itself has
    exited), SIGKILL to what is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # nobody left in the session
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 30.0)
        while time.monotonic() < deadline and _session_alive(proc):
            time.sleep(0.1)
        if not _session_alive(proc):
            break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _session_alive(proc: subprocess.Popen) -> bool:
    proc.poll()  # reap the leader, else it counts as alive (a zombie)
    try:
        os.killpg(proc.pid, 0)
        return True
    except ProcessLookupError:
        return False
