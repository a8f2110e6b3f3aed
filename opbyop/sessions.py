"""Stopping a child process started in a session of its own, with everything it started there
(a server's workers, a cluster's processes), even those left behind by a child that already exited."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def stop_session(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM to the child's whole session, SIGKILL to what is left after `grace` seconds; returns once
    none of it is left (a caller that says it stopped must leave nothing answering behind it)."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break  # nobody left in the session
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _session_alive(proc):
            time.sleep(0.05)
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
