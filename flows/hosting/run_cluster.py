"""The Dask cluster a run's work goes to, and what happens when it is lost.

A cluster opbyop started (the CLI's or `opbyop serve`'s cluster process, or a LocalCluster in the
flow's own process) and lost during a run is started again, up to MAX_CLUSTER_RESTARTS times; the
run warms its op workers there and hands out again what was in flight (flows/engine/analyze_run.py).
A user's own scheduler (an address) is never restarted: what was in flight on it is infra_error, in
words that name it, and the run stops; starting it again and running the same run id resumes.
A cluster lost more often than the limit stops the run the same way.

Losing the scheduler cancels every Dask future at once; the client then tries to reconnect for
30 s, during which anything sent waits. So a lost cluster is asked nothing more: lost() reads
only the client's state and the cluster process's, and the run's gate lets its waiting ops go.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import ExitStack, contextmanager
from typing import Iterator

from distributed import Client

from opbyop_flows.hosting.cluster import dask_client
from opbyop_flows.hosting.cluster_process import ClusterProcess
from opbyop.config import ClusterConfig
from opbyop.environment import environment
from opbyop.errors import OpbyopError

MAX_CLUSTER_RESTARTS = 3  # a cluster lost more often in one run has a cause a restart will not fix


def run_process(config: ClusterConfig, process: ClusterProcess | None) -> tuple[str, ClusterProcess | None]:
    """The address the configuration names ("" none), and the caller's cluster process if it is the
    run's: the configuration names no address or one it had."""
    address = config.address or environment().dask_address or ""
    return address, process if process is not None and (not address or process.had(address)) else None


def standing_address(config: ClusterConfig, process: ClusterProcess | None = None) -> str | None:
    """The address of the run's cluster when it runs apart from this process (the caller's cluster
    process, once it answers, or a user's scheduler), without connecting; None: the run starts a
    LocalCluster in this process."""
    address, process = run_process(config, process)
    return process.wait() if process is not None else address or None


class RunCluster:
    """The run's cluster: its client, whether opbyop started it (`ours`), and restart().

    `process`: the cluster process the caller started for the run (the CLI's, `opbyop serve`'s); it
    is the run's when the configuration names no address or one it had. Use as a context manager:
    the client is closed at its end (and a LocalCluster started in this process), a cluster process
    is left to its caller."""

    def __init__(self, config: ClusterConfig, process: ClusterProcess | None = None):
        self.config = config
        address, self.process = run_process(config, process)
        self.ours = self.process is not None or not address
        self.restarts = 0  # how many times it was started again
        self._open = ExitStack()
        self.client: Client | None = None
        self.address = ""  # the scheduler's, once connected

    def __enter__(self) -> RunCluster:
        self.client = self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self._let_go()

    def lost(self) -> bool:
        """Whether the cluster is gone: its process exited, or the client lost the scheduler."""
        exited = self.process is not None and self.process.exit_code() is not None
        return exited or (self.client is not None and self.client.status != "running")

    def restart(self, run_id: str) -> Client:
        """Our lost cluster started again (its op workers are the caller's to warm); its client.
        OpbyopError, with the fix, for a user's scheduler or one lost more than the limit allows.
        Either way the lost client is let go of: what still waits on it is cancelled at once."""
        self._let_go()
        if not self.ours:
            raise OpbyopError(f"the Dask scheduler at {self.address} was lost during run {run_id} (it is not "
                              "opbyop's, so it was not restarted; the ops running on it are infra_error)",
                              f"start it again; the next run with the same run id ({run_id}) resumes")
        if self.restarts >= MAX_CLUSTER_RESTARTS:
            log = f" (see {self.process.log_path})" if self.process is not None else ""
            raise OpbyopError(f"the local Dask cluster was lost {self.restarts + 1} times during run {run_id}, "
                              f"more than the {MAX_CLUSTER_RESTARTS} restarts allowed (MAX_CLUSTER_RESTARTS)",
                              f"find what kills it{log}: memory (fewer --workers) or another process; "
                              f"the next run with the same run id ({run_id}) resumes")
        self.restarts += 1
        if self.process is not None:
            self.process.restart()
        self.client = self._connect()
        return self.client

    def lost_words(self, run_id: str, what: str) -> str:
        """What `what` (this op, the whole model), on the lost cluster and not run again, says about
        it, with the fix."""
        whose = "the local Dask cluster" if self.ours else f"the Dask scheduler at {self.address}"
        again = "" if self.ours else "start it again; "
        return (f"{whose} was lost while {what} ran on it; "
                f"fix: {again}the next run with the same run id ({run_id}) resumes")

    def _let_go(self) -> None:
        """The client closed (and a LocalCluster started in this process). Closing one that is
        reconnecting to a lost scheduler cancels that, which Dask logs as an error with a
        traceback: the run says once, in its own words, that the cluster was lost."""
        with _without_cancelled_reconnects(logging.getLogger("distributed.client")):
            self._open.close()
        self._open = ExitStack()

    def _connect(self) -> Client:
        config = self.config
        if self.process is not None:  # its current address: a restart changes it
            config = config.model_copy(update={"address": self.process.wait()})
        client = self._open.enter_context(dask_client(config))
        self.address = client.scheduler.address
        return client


@contextmanager
def _without_cancelled_reconnects(logger: logging.Logger) -> Iterator[None]:
    def keep(record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.exc_info[0] is asyncio.CancelledError)

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
