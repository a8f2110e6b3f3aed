"""A viewer's server on this machine (Model Explorer, TT-NN Visualizer): its port, waiting until it
answers, and a service manager's stop read as Ctrl-C (stopping it: opbyop.sessions)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request

from opbyop.errors import StoreError

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port: int, host: str = HOST) -> None:
    """A clear error for a port in use; a port with only closing connections is free (the server
    binds with SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise StoreError(f"port {port} on {host} is taken ({e.strerror})",
                             "pass another --port, or leave it out to take a free one") from None


def wait_until_served(child: subprocess.Popen, url: str, name: str, fix: str, timeout_s: float,
                      poll_s: float = 0.1) -> None:
    """Until `url` answers; `name` exiting first, or not answering within `timeout_s`, is an error
    (`fix`: what to do when it exits at start)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise StoreError(f"{name} exited at start (exit status {child.returncode})", f"its messages are above; {fix}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(poll_s)
    raise StoreError(f"{name} did not answer within {timeout_s:g} s", "the machine may be busy: run the command again")


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: a service manager's stop cleans up as Ctrl-C does."""
    raise KeyboardInterrupt
