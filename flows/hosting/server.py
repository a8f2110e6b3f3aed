"""The Prefect API a CLI run talks to: the server the user already runs, or one started for the run.

Prefect's own temporary server is started lazily by the first flow call, takes 8-18 s to answer,
and is left behind when its process is killed. Started here instead: at once, beside the cluster
and the export; with the product's settings (flows/hosting/settings.py); tied to the CLI process
(flows/hosting/tied.py), so neither Ctrl-C nor kill -9 leaves it behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from opbyop_flows.hosting.settings import server_env
from opbyop_flows.hosting.tied import spawn_tied
from opbyop.errors import OpbyopError
from opbyop.sessions import stop_session


def healthy(api_url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=timeout) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError, ValueError):
        return False


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment or the active Prefect profile, if any (read without
    importing Prefect, which takes 2-3 s: the server should be starting by then)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    try:
        profiles = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active", "ephemeral")
    url = profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL")
    return str(url) if url else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _project_root() -> str:
    """Where the server process imports flows/ from: where this process did."""
    return str(Path(__file__).resolve().parents[2])


class PrefectApi:
    """An API URL to use: an existing server's (reused as is) or a server of our own."""

    def __init__(self, log_dir: Path, port: int | None = None, temporary: bool = True):
        """`temporary`: a server for one CLI run (UI and the scheduling services off, a free port);
        else a standing one (`opbyop serve`: UI on, on `port` if given)."""
        self.url = configured_api_url()
        self._proc: subprocess.Popen | None = None
        self._log_path = log_dir / "prefect-server.log"
        if self.url:
            return
        port = port or _free_port()
        self.url = f"http://127.0.0.1:{port}/api"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "wb") as log:
            # what Prefect's temporary server runs (UI off), with the product's settings and a
            # database migrated once per Prefect version (flows/hosting/prefect_db.py)
            self._proc = spawn_tied(
                [sys.executable, "-m", "uvicorn", "--app-dir", _project_root(), "--factory",
                 "opbyop_flows.hosting.prefect_db:create_app", "--host", "127.0.0.1", "--port", str(port),
                 "--log-level", "error", "--lifespan", "on"],
                env=server_env(ui_api_url=self.url, temporary=temporary), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)

    @property
    def started_here(self) -> bool:
        return self._proc is not None

    def wait(self, timeout: float = 180.0) -> str:
        """The URL, once /health answers."""
        assert self.url is not None
        deadline = time.monotonic() + timeout
        while not healthy(self.url):
            if self._proc is not None and self._proc.poll() is not None:
                raise OpbyopError(f"the Prefect server started for this run exited ({self._proc.returncode}): "
                                  f"{self._log_tail()}", f"see {self._log_path}")
            if time.monotonic() > deadline:
                raise OpbyopError(f"the Prefect API at {self.url} did not answer within {timeout:.0f} s",
                                  "start it (prefect server start) or unset PREFECT_API_URL"
                                  if self._proc is None else f"see {self._log_path}")
            time.sleep(0.1)
        return self.url

    def exit_code(self) -> int | None:
        """A server started here that has exited: its code (None: running, or not ours)."""
        return None if self._proc is None else self._proc.poll()

    def close(self, wait: bool = True) -> None:
        """Stop a server started here (SIGTERM: it flushes what it holds); without `wait`, its
        supervisor finishes the job after this process is gone (flows/hosting/tied.py)."""
        if self._proc is not None:
            stop_session(self._proc) if wait else self._proc.terminate()
            self._proc = None

    def _log_tail(self) -> str:
        try:
            return " | ".join(self._log_path.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return ""


def drain_prefect() -> None:
    """Logs and events still queued go to the server before it stops (else they are lost, and
    Prefect's exit handlers retry against a server that is gone)."""
    if "prefect" not in sys.modules:  # nothing was sent from this process
        return
    try:
        from prefect.events.worker import EventsWorker
        from prefect.logging.handlers import APILogWorker

        for service in (APILogWorker, EventsWorker):
            service.drain_all(timeout=10)
    except Exception:  # a missing flush must not hide the run's outcome
        pass


@contextmanager
def without_heartbeats() -> Iterator[None]:
    """Flow runs in this thread send no heartbeat. For a run on a temporary server of its own: only a
    standing server's zombie automation reads heartbeats (a run's own server dies with the run, whose
    next run's sweep marks it Crashed), and the heartbeat thread, sleeping in one-second steps, holds
    every flow's end by up to a second."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings  # deferred: 2-3 s of imports

    with temporary_settings(restore_defaults={PREFECT_FLOWS_HEARTBEAT_FREQUENCY}):
        yield


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="wait until a Prefect API answers on /health")
    parser.add_argument("--wait", metavar="API_URL", required=True, help="e.g. http://127.0.0.1:4200/api")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    while not healthy(args.wait):
        if time.monotonic() > deadline:
            raise SystemExit(f"error: no Prefect API answered at {args.wait} within {args.timeout:.0f} s; "
                             f"fix: look at the server's log")
        time.sleep(0.5)
    print(f"Prefect API at {args.wait} is healthy")


if __name__ == "__main__":
    main()
