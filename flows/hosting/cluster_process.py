"""The LocalCluster of one CLI run, in a child process (`python -m opbyop_flows.hosting.cluster`) started at
once, beside the Prefect server and the export; this side imports neither Dask nor JAX, so the CLI
can start it before its own imports."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from opbyop_flows.hosting.tied import spawn_tied
from opbyop.errors import OpbyopError
from opbyop.sessions import stop_session


class ClusterProcess:
    """A LocalCluster in a child process of the CLI, its op workers warming up at once.

    Its own session (a terminal's Ctrl-C reaches only the CLI, which then stops the run in order) and
    tied to the CLI (flows/hosting/tied.py): it dies with it, even on kill -9, and its Dask workers with it
    (they exit when their parent does)."""

    def __init__(self, workers: int, chip: str, log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / "dask-cluster.log"
        with open(self.log_path, "wb") as log:
            self._proc = spawn_tied([sys.executable, "-m", "opbyop_flows.hosting.cluster", "--workers", str(workers), "--chip", chip],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
        self.address: str | None = None

    def wait(self, timeout: float = 180.0) -> str:
        """The scheduler's address, once the cluster is up (its op workers may still be warming)."""
        if self.address:
            return self.address
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
        return self.address

    def exit_code(self) -> int | None:
        """None while the cluster runs."""
        return self._proc.poll()

    def close(self, wait: bool = True) -> None:
        """Stop the cluster and all it started; without `wait`, its supervisor finishes the job
        after this process is gone (flows/hosting/tied.py)."""
        stop_session(self._proc) if wait else self._proc.terminate()

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-3:])
        except OSError:
            return ""
