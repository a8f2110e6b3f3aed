"""The LocalCluster of one CLI run (or of `opbyop serve`), in a child process (`python -m
opbyop_flows.hosting.cluster`) started at once, beside the Prefect server and the export, or on the
run's first need (a run with nothing to export or analyse needs none: flows/cli/cluster_need.py);
this side imports neither Dask nor JAX, so the CLI can start it before its own imports. A run that
loses it starts it again (restart(): flows/hosting/run_cluster.py)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from opbyop_flows.hosting.tied import spawn_tied
from opbyop.errors import OpbyopError
from opbyop.sessions import stop_session


class ClusterProcess:
    """A LocalCluster in a child process of the CLI, its op workers warming up as soon as it starts.

    Its own session (a terminal's Ctrl-C reaches only the CLI, which then stops the run in order) and
    tied to the CLI (flows/hosting/tied.py): it dies with it, even on kill -9, and its Dask workers with it
    (they exit when their parent does)."""

    def __init__(self, workers: int, chip: str, log_dir: Path, compiler: str | None = None, start: bool = True):
        """`compiler`: the spec of the build whose op workers it warms (None: the installed plugin);
        without `start`, the cluster starts on start() or the first wait()."""
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "dask-cluster.log"
        self._command = [sys.executable, "-m", "opbyop_flows.hosting.cluster", "--workers", str(workers),
                         "--chip", chip, *(["--compiler", compiler] if compiler else [])]
        self._starting = threading.Lock()
        self._closed = False
        self._proc: subprocess.Popen | None = self._spawn("wb") if start else None
        self.address: str | None = None
        self._addresses: set[str] = set()  # every address it had: a run given an old one still means this cluster
        self._reading = threading.Lock()  # one reader of its address line (the run's start-up, its exports)

    @property
    def started(self) -> bool:
        return self._proc is not None

    def start(self) -> None:
        """Start the cluster now, if it has not started (from any thread); not once it was closed."""
        with self._starting:
            if self._proc is None and not self._closed:
                self._proc = self._spawn_held("wb")

    def _spawn(self, mode: str) -> subprocess.Popen:
        with open(self.log_path, mode) as log:
            return spawn_tied(self._command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)

    def wait(self, timeout: float = 180.0) -> str:
        """The scheduler's address, once the cluster is up (its op workers may still be warming);
        started now if it was not."""
        self.start()
        with self._reading:
            return self._read_address(timeout)

    def _read_address(self, timeout: float) -> str:
        if self.address:
            return self.address
        if self._proc is None:  # closed before it ever started
            raise OpbyopError("the local Dask cluster was stopped before it started", "run the command again")
        assert self._proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line and time.monotonic() < deadline:
            line = self._proc.stdout.readline()  # one line, written once the cluster is up
            if not line and self._proc.poll() is not None:
                break
        if not line:
            raise OpbyopError(f"the local Dask cluster did not start: {self._log_tail()}", f"see {self.log_path}")
        self.address = json.loads(line)["address"]
        self._addresses.add(self.address)
        return self.address

    def had(self, address: str) -> bool:
        """Whether `address` is (or was, before a restart) this cluster's."""
        return address in self._addresses

    @property
    def pid(self) -> int | None:
        """The cluster's own process (its supervisor's child; None once it is gone): killing it loses
        the cluster, as the kernel's out-of-memory killer would, and its supervisor takes its Dask
        workers with it."""
        if self._proc is None:
            return None
        try:
            children = psutil.Process(self._proc.pid).children()
        except psutil.NoSuchProcess:
            return None
        return children[0].pid if children else None

    def restart(self, timeout: float = 180.0) -> str:
        """A new cluster in place of a lost one (what is left of the old one stopped first), its op
        workers warming, its log appended to the old one's; its address."""
        self.close(wait=True)
        with self._starting:
            self._proc, self.address, self._closed = self._spawn_held("ab"), None, False
        return self.wait(timeout)

    def _spawn_held(self, mode: str) -> subprocess.Popen:
        """_spawn from a thread that lives as long as this process: the tie (flows/hosting/tied.py)
        follows the thread that starts the child, and the run's thread that asks for a restart ends
        before the cluster should (`opbyop serve` keeps it for the runs after)."""
        spawned: queue.Queue[subprocess.Popen | BaseException] = queue.Queue()

        def hold() -> None:
            try:
                spawned.put(self._spawn(mode))
            except BaseException as e:  # noqa: BLE001  (raised in the caller's thread)
                spawned.put(e)
                return
            threading.Event().wait()

        threading.Thread(target=hold, name="cluster-restarted", daemon=True).start()
        proc = spawned.get()
        if isinstance(proc, BaseException):
            raise proc
        return proc

    def exit_code(self) -> int | None:
        """None while the cluster runs, or before it started."""
        return self._proc.poll() if self._proc is not None else None

    def close(self, wait: bool = True) -> None:
        """Stop the cluster and all it started (one not started yet never starts); without `wait`, its
        supervisor finishes the job after this process is gone (flows/hosting/tied.py)."""
        with self._starting:
            self._closed = True
            if self._proc is not None:
                stop_session(self._proc) if wait else self._proc.terminate()

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return ""
